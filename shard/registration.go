package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
)

// OwnershipHandler is implemented by handlers that want to hear when this
// member starts or stops delivering a range. OnAcquire comes before the
// range's first OnAdd; OnRelease after its last call: the range's objects
// still exist, and no OnDelete comes for them. They are called between the
// handler's other calls, never during one, and must return quickly.
type OwnershipHandler interface {
	OnAcquire(Range)
	OnRelease(Range)
}

// OwnershipFuncs adds OnAcquire and OnRelease to a handler: nil functions
// are skipped.
type OwnershipFuncs struct {
	cache.ResourceEventHandler
	AcquireFunc func(Range)
	ReleaseFunc func(Range)
}

// OnAcquire calls AcquireFunc if it is not nil.
func (f OwnershipFuncs) OnAcquire(r Range) {
	if f.AcquireFunc != nil {
		f.AcquireFunc(r)
	}
}

// OnRelease calls ReleaseFunc if it is not nil.
func (f OwnershipFuncs) OnRelease(r Range) {
	if f.ReleaseFunc != nil {
		f.ReleaseFunc(r)
	}
}

// registration is a handler added to the sharded informer: added to each
// delivered range's informer, with its calls serialised.
type registration struct {
	s   *Informer
	h   actors.ContextEventHandler // wrapped: calls serialised by mu
	own OwnershipHandler           // nil when the handler does not implement it
	// acquired are the ranges OnAcquire was called for (guarded by mu).
	acquired map[int]bool
	options  cache.HandlerOptions
	mu       sync.Mutex // held during every call of the handler
	removed  atomic.Bool
	synced   atomic.Bool
	name     string // the handler's name (actors.NamedHandler), for Stats
	seq      int    // registration order, for Stats
	// calls and panics count the handler's calls on every range, and those
	// that panicked (the range's listener recovers the panic).
	calls, panics atomic.Int64
	// shutdown is closed when the registration is removed and no call runs.
	shutdown     chan struct{}
	shutdownOnce sync.Once
}

var _ cache.ResourceEventHandlerRegistration = (*registration)(nil)

// AddEventHandler adds a handler with the default resync period. It gets
// OnAdd(obj, true) for the objects of every range this member delivers, and
// of every range it acquires later, then every change of them.
func (s *Informer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return s.AddEventHandlerWithOptions(h, cache.HandlerOptions{})
}

// AddEventHandlerWithResyncPeriod adds a handler with its own resync period.
func (s *Informer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return s.AddEventHandlerWithOptions(h, cache.HandlerOptions{ResyncPeriod: &resync})
}

// AddEventHandlerWithOptions adds a handler with options.
func (s *Informer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	if h == nil {
		return nil, errors.New("shard: nil event handler")
	}
	return s.add(h, options)
}

// AddContextEventHandler adds a handler whose calls get a context carrying
// the delta's handler span (see actors.ContextEventHandler).
func (s *Informer) AddContextEventHandler(h actors.ContextEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	if h == nil {
		return nil, errors.New("shard: nil event handler")
	}
	return s.add(h, cache.HandlerOptions{})
}

func (s *Informer) add(h any, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	reg := &registration{s: s, options: options, shutdown: make(chan struct{}), acquired: map[int]bool{}}
	own, _ := actors.UnwrapHandler(h).(OwnershipHandler)
	if own == nil {
		own, _ = h.(OwnershipHandler)
	}
	reg.own = own
	wrapped, err := actors.WrapHandler(h, func(inner actors.ContextEventHandler) actors.ContextEventHandler {
		return serialised{reg: reg, h: inner}
	})
	if err != nil {
		return nil, err
	}
	reg.h = wrapped
	if n, ok := wrapped.(actors.Named); ok {
		reg.name = n.HandlerName()
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil, fmt.Errorf("shard: handler not added: the informer has stopped")
	}
	s.regSeq++
	reg.seq = s.regSeq
	s.regs[reg] = struct{}{}
	var delivered []*rangeInformer
	for _, ri := range s.ranges {
		if ri.delivering {
			delivered = append(delivered, ri)
		}
	}
	s.mu.Unlock()
	for _, ri := range delivered {
		s.attach(reg, ri)
	}
	return reg, nil
}

// attach gives a delivered range to reg: OnAcquire first, then the range
// informer's handler. The user's OnAcquire runs without Informer.mu held,
// so that a handler may call the informer.
func (s *Informer) attach(reg *registration, ri *rangeInformer) {
	if reg.own != nil {
		reg.call(func() {
			if !reg.acquired[ri.r.Index] {
				reg.acquired[ri.r.Index] = true
				reg.own.OnAcquire(ri.r)
			}
		})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ri.delivering || reg.removed.Load() {
		return
	}
	if _, done := ri.regs[reg]; done {
		return
	}
	rreg, err := ri.inf.AddContextEventHandlerWithOptions(reg.h, reg.options)
	if err != nil {
		s.log.Error("cannot add a handler to a range's informer", "range", ri.r.String(), "err", err)
		return
	}
	ri.regs[reg] = rreg
}

// released tells the handler that range r is released.
func (reg *registration) released(r Range) {
	if reg.own != nil {
		reg.call(func() {
			if reg.acquired[r.Index] {
				delete(reg.acquired, r.Index)
				if !reg.removed.Load() {
					reg.own.OnRelease(r)
				}
			}
		})
	}
}

// call runs f as one of the handler's calls.
func (reg *registration) call(f func()) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			reg.s.log.Error("a handler's ownership callback panicked", "panic", fmt.Sprint(p))
		}
	}()
	f()
}

// RemoveEventHandler removes a handler from every range. Once it returns
// the handler is not called again; a call in flight finishes (ShutdownChan
// closes then).
func (s *Informer) RemoveEventHandler(handle cache.ResourceEventHandlerRegistration) error {
	reg, ok := handle.(*registration)
	if !ok {
		return fmt.Errorf("shard: registration %T does not belong to a sharded informer", handle)
	}
	if reg.s != s {
		return nil
	}
	s.mu.Lock()
	if _, ok := s.regs[reg]; !ok {
		s.mu.Unlock()
		return nil
	}
	delete(s.regs, reg)
	reg.removed.Store(true)
	var waits []<-chan struct{}
	for _, ri := range s.ranges {
		if rreg, ok := ri.regs[reg]; ok {
			_ = ri.inf.RemoveEventHandler(rreg)
			if sc, ok := rreg.(actors.Registration); ok {
				waits = append(waits, sc.ShutdownChan())
			}
			delete(ri.regs, reg)
		}
	}
	s.mu.Unlock()
	go func() {
		for _, w := range waits {
			<-w
		}
		reg.shutdownOnce.Do(func() { close(reg.shutdown) })
	}()
	return nil
}

// ShutdownChan is closed once the handler was removed and its last call
// has returned.
func (reg *registration) ShutdownChan() <-chan struct{} { return reg.shutdown }

// HasSynced is true once the informer has synced and the handler has had
// the objects of every range delivered then. It stays true.
func (reg *registration) HasSynced() bool {
	if reg.synced.Load() {
		return true
	}
	if !reg.s.HasSynced() {
		return false
	}
	reg.s.mu.Lock()
	defer reg.s.mu.Unlock()
	for _, ri := range reg.s.ranges {
		if !ri.delivering {
			continue
		}
		rreg, ok := ri.regs[reg]
		if !ok || !rreg.HasSynced() {
			return false
		}
	}
	reg.synced.Store(true)
	return true
}

// HasSyncedChecker returns a checker of HasSynced.
func (reg *registration) HasSyncedChecker() cache.DoneChecker {
	return reg.s.signals.add("shard handler", reg.HasSynced)
}

// serialised calls a handler under its registration's lock, so that the
// range informers' listeners never call it at the same time.
type serialised struct {
	reg *registration
	h   actors.ContextEventHandler
}

func (w serialised) OnAdd(ctx context.Context, obj any, initial bool) {
	w.reg.mu.Lock()
	defer w.reg.end()
	w.h.OnAdd(ctx, obj, initial)
}

func (w serialised) OnUpdate(ctx context.Context, oldObj, newObj any) {
	w.reg.mu.Lock()
	defer w.reg.end()
	w.h.OnUpdate(ctx, oldObj, newObj)
}

func (w serialised) OnDelete(ctx context.Context, obj any) {
	w.reg.mu.Lock()
	defer w.reg.end()
	w.h.OnDelete(ctx, obj)
}

// end ends a call: it counts it, and a panic, which it passes on to the
// range's listener.
func (reg *registration) end() {
	reg.calls.Add(1)
	if p := recover(); p != nil {
		reg.panics.Add(1)
		reg.mu.Unlock()
		panic(p)
	}
	reg.mu.Unlock()
}
