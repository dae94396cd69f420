package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard/handover"
)

// OwnershipHandler is implemented by handlers that want to hear when this
// member starts or stops delivering a range. OnAcquire comes before the
// range's first OnAdd, with the range's fencing token (see
// Informer.Epoch); OnRelease after its last call: the range's objects
// still exist, and no OnDelete comes for them. They are called between the
// handler's other calls, never during one, and must return quickly.
type OwnershipHandler interface {
	OnAcquire(r Range, epoch uint64)
	OnRelease(r Range)
}

// OwnershipFuncs adds OnAcquire and OnRelease to a handler: nil functions
// are skipped.
type OwnershipFuncs struct {
	cache.ResourceEventHandler
	AcquireFunc func(r Range, epoch uint64)
	ReleaseFunc func(r Range)
}

// OnAcquire calls AcquireFunc if it is not nil.
func (f OwnershipFuncs) OnAcquire(r Range, epoch uint64) {
	if f.AcquireFunc != nil {
		f.AcquireFunc(r, epoch)
	}
}

// OnRelease calls ReleaseFunc if it is not nil.
func (f OwnershipFuncs) OnRelease(r Range) {
	if f.ReleaseFunc != nil {
		f.ReleaseFunc(r)
	}
}

// Claim is a range this member delivers, and its fencing token.
type Claim struct {
	Range Range
	Epoch uint64
}

type claimKey struct{}

// ClaimFrom returns the range and fencing token of the handler call whose
// context ctx is (a ContextEventHandler's calls on a sharded informer).
func ClaimFrom(ctx context.Context) (Claim, bool) {
	c, ok := ctx.Value(claimKey{}).(Claim)
	return c, ok
}

// registration is a handler added to the sharded informer: added to each
// delivered range's informer, with its calls serialised.
type registration struct {
	s       *Informer
	h       any              // as the user gave it
	own     OwnershipHandler // nil when the handler does not implement it
	options cache.HandlerOptions
	// acquired are the ranges OnAcquire was called for (guarded by mu).
	acquired map[int]bool
	mu       sync.Mutex // held during every call of the handler
	removed  atomic.Bool
	synced   atomic.Bool
	name     string // the handler's name (actors.NamedHandler), for Stats
	seq      int    // registration order, for Stats
	// calls and panics count the handler's calls on every range, and those
	// that panicked (the range's listener recovers the panic); refused the
	// calls the gate refused (the member's claim had lapsed).
	calls, panics, refused atomic.Int64
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
	return s.add(h, nil, options)
}

// AddContextEventHandler adds a handler whose calls get a context carrying
// the delta's handler span (see actors.ContextEventHandler) and the range's
// claim (ClaimFrom).
func (s *Informer) AddContextEventHandler(h actors.ContextEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	if h == nil {
		return nil, errors.New("shard: nil event handler")
	}
	return s.add(h, nil, cache.HandlerOptions{})
}

// AddOwnershipHandler adds a handler that hears only which ranges this
// member delivers: OnAcquire before any handler's first call of a range,
// OnRelease after every handler's last call of it and before the range's
// record is released (a callback that blocks holds the release back). It
// is given no objects: no range's informer gets a listener for it.
func (s *Informer) AddOwnershipHandler(h OwnershipHandler) (cache.ResourceEventHandlerRegistration, error) {
	if h == nil {
		return nil, errors.New("shard: nil ownership handler")
	}
	return s.add(nil, h, cache.HandlerOptions{})
}

func (s *Informer) add(h any, own OwnershipHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	reg := &registration{s: s, h: h, options: options, shutdown: make(chan struct{}), acquired: map[int]bool{}}
	if h != nil {
		own, _ = actors.UnwrapHandler(h).(OwnershipHandler)
		if own == nil {
			own, _ = h.(OwnershipHandler)
		}
		probe, err := actors.WrapHandler(h, func(inner actors.ContextEventHandler) actors.ContextEventHandler { return inner })
		if err != nil {
			return nil, err
		}
		if n, ok := probe.(actors.Named); ok {
			reg.name = n.HandlerName()
		}
	}
	reg.own = own
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil, fmt.Errorf("shard: handler not added: the informer has stopped")
	}
	s.regSeq++
	reg.seq = s.regSeq
	s.regs[reg] = struct{}{}
	s.mu.Unlock()
	for _, ri := range *s.delivered.Load() {
		kr := ri.of(s)
		acquired := s.acquire(reg, ri)
		s.attach(reg, kr, nil, acquired)
	}
	return reg, nil
}

// acquire tells reg, if it is an ownership handler that has not heard it
// yet, that it has the delivered range ri (OnAcquire), and reports whether
// it told it now. A range's handlers hear it before their first call of
// any kind's; the user's callbacks run without Informer.mu held, so that a
// handler may call the informer.
func (s *Informer) acquire(reg *registration, ri *rangeInformer) bool {
	if reg.removed.Load() || !ri.delivering.Load() || reg.own == nil {
		return false
	}
	acquired := false
	reg.call(func() {
		if !reg.acquired[ri.r.Index] {
			reg.acquired[ri.r.Index] = true
			acquired = true
			reg.own.OnAcquire(ri.r, ri.token)
		}
	})
	return acquired
}

// attach gives a delivered range's kind to reg: OnDelete for each object
// of gone (deleted since the range's position), then the kind's informer's
// handler. acquired: reg heard OnAcquire for it just now (acquire), and
// hears OnRelease here if the range stopped being delivered meanwhile.
func (s *Informer) attach(reg *registration, kr *kindRange, gone []handover.ObjectRef, acquired bool) {
	if reg.removed.Load() || !kr.ri.delivering.Load() {
		if acquired {
			reg.released(kr.ri.r)
		}
		return
	}
	if reg.h == nil {
		return // AddOwnershipHandler's: no listener; detachAll tells it OnRelease
	}
	s.mu.Lock()
	_, done := kr.attached[reg]
	s.mu.Unlock()
	if done {
		return
	}
	var rh *rangeHandler
	wrapped, err := actors.WrapHandler(reg.h, func(inner actors.ContextEventHandler) actors.ContextEventHandler {
		rh = newRangeHandler(reg, kr, inner)
		return rh
	})
	if err != nil {
		s.log.Error("cannot wrap a handler (a bug of ours)", "err", err)
		return
	}
	rh.tombstones(gone)
	if !s.listen(reg, kr, wrapped, rh) && acquired {
		// The range stopped being delivered meanwhile (a fence): no
		// detach will know of this handler, which heard OnAcquire.
		reg.released(kr.ri.r)
	}
}

// listen adds reg's handler on kr, wrapped, to the kind's informer of the
// range, if the range is still delivered and reg not removed; it reports
// whether the handler is attached (by it, or already).
func (s *Informer) listen(reg *registration, kr *kindRange, wrapped actors.ContextEventHandler, rh *rangeHandler) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !kr.ri.delivering.Load() || reg.removed.Load() {
		return false
	}
	if _, done := kr.attached[reg]; done {
		return true
	}
	rreg, err := kr.inf.AddContextEventHandlerWithOptions(wrapped, reg.options)
	if err != nil {
		s.log.Error("cannot add a handler to a range's informer", "range", kr.ri.r.String(), "err", err)
		return false
	}
	kr.attached[reg] = &attachment{rreg: rreg, h: rh}
	return true
}

// waitSubscribed waits until every handler attached to kr has its
// listener subscribed to the kind's cache of the range, the range's
// informers stop, the range is dropped or the core ends a release's drain
// (DrainTimeUp); it reports whether they all were.
func (s *Informer) waitSubscribed(kr *kindRange) bool {
	ri := kr.ri
	s.mu.Lock()
	var subs []<-chan struct{}
	for _, a := range kr.attached {
		if r, ok := a.rreg.(interface{ SubscribedChan() <-chan struct{} }); ok {
			subs = append(subs, r.SubscribedChan())
		}
	}
	s.mu.Unlock()
	for _, sub := range subs {
		select {
		case <-sub:
		case <-kr.done:
			return false
		case <-ri.droppedCh:
			return false
		case <-ri.drainUp:
			return false
		}
	}
	return true
}

// given reports whether every handler attached to kr has been called with
// the version obj or a newer one.
func (s *Informer) given(kr *kindRange, obj int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range kr.attached {
		if a.h.seen.Load() < obj {
			return false
		}
	}
	return true
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
	for kr := range s.live {
		if a, ok := kr.attached[reg]; ok {
			_ = kr.inf.RemoveEventHandler(a.rreg)
			if sc, ok := a.rreg.(actors.Registration); ok {
				waits = append(waits, sc.ShutdownChan())
			}
			delete(kr.attached, reg)
			kr.ri.progress.Fire() // a drain waiting for it looks again
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
	for _, ri := range *reg.s.delivered.Load() {
		if reg.h == nil {
			break // an ownership handler heard OnAcquire as it was added
		}
		a, ok := ri.of(reg.s).attached[reg]
		if !ok || !a.rreg.HasSynced() {
			return false
		}
	}
	reg.synced.Store(true)
	return true
}

// HasSyncedChecker returns a checker of HasSynced.
func (reg *registration) HasSyncedChecker() cache.DoneChecker {
	return reg.s.signals.Add("shard handler", reg.HasSynced)
}

// rangeHandler is a handler on one range: a call goes through only while
// the range is delivered and the member's claim is valid (the gate), under
// the registration's lock (so that the range informers' listeners never
// call the handler at the same time), with the range's claim in its
// context. It remembers the newest resourceVersion it handed over, which a
// release waits for.
type rangeHandler struct {
	reg   *registration
	ri    *rangeInformer
	kr    *kindRange // the kind's informer of ri it is on
	inner actors.ContextEventHandler
	seen  atomic.Int64
	// claim is the range's Claim for the calls' contexts, boxed once; nil
	// when inner drops its context (a cache.ResourceEventHandler's calls):
	// no one could read it, and a call then allocates nothing for it.
	claim any
}

// newRangeHandler returns the handler that calls inner for a kind's
// informer of a range, kr. The range's token is set before it is given to
// any handler (activate).
func newRangeHandler(reg *registration, kr *kindRange, inner actors.ContextEventHandler) *rangeHandler {
	ri := kr.ri
	h := &rangeHandler{reg: reg, ri: ri, kr: kr, inner: inner}
	// A handler written as a cache.ResourceEventHandler stands behind
	// actors' adapter, which drops the context: unwrapped, it is no
	// ContextEventHandler.
	if _, ok := actors.UnwrapHandler(inner).(actors.ContextEventHandler); ok {
		h.claim = Claim{Range: ri.r, Epoch: ri.token}
	}
	return h
}

func (h *rangeHandler) OnAdd(ctx context.Context, obj any, initial bool) {
	h.call(ctx, func(ctx context.Context) { h.inner.OnAdd(ctx, obj, initial) }, versionOf(obj))
}

func (h *rangeHandler) OnUpdate(ctx context.Context, oldObj, newObj any) {
	h.call(ctx, func(ctx context.Context) { h.inner.OnUpdate(ctx, oldObj, newObj) }, versionOf(newObj))
}

func (h *rangeHandler) OnDelete(ctx context.Context, obj any) {
	h.call(ctx, func(ctx context.Context) { h.inner.OnDelete(ctx, obj) }, versionOf(obj))
}

func (h *rangeHandler) call(ctx context.Context, f func(context.Context), rv string) {
	reg := h.reg
	// While the member's claim has lapsed the call waits: either a renewal
	// that was under way when it lapsed extends it, or the member is fenced
	// and the range stops being delivered. Dropping the call instead would
	// lose it when the claim comes back.
	//
	// The gate is passed again once the lock is held: a call may wait for
	// the lock as long as another range's call lasts, and the process may
	// be paused meanwhile, past the claim.
	for {
		for h.ri.delivering.Load() && !reg.s.callable() {
			valid, moved := reg.s.validity.Wait(), h.ri.progress.Wait()
			if !h.ri.delivering.Load() || reg.s.callable() {
				break // changed as the waits were taken
			}
			select {
			case <-valid:
			case <-moved:
			}
		}
		if !h.ri.delivering.Load() {
			reg.refused.Add(1)
			return
		}
		reg.mu.Lock()
		if h.ri.delivering.Load() && reg.s.callable() {
			break
		}
		reg.mu.Unlock()
	}
	if n, err := strconv.ParseInt(rv, 10, 64); err == nil && n > h.seen.Load() {
		defer h.given(n)
	}
	if h.claim != nil {
		ctx = context.WithValue(ctx, claimKey{}, h.claim)
	}
	defer reg.end()
	f(ctx)
}

// given records that the handler was given version n of the range, and
// wakes a drain waiting for it.
func (h *rangeHandler) given(n int64) {
	h.seen.Store(n)
	h.ri.progress.Fire()
}

// tombstones calls OnDelete with a cache.DeletedFinalStateUnknown for each
// object deleted since the position the range resumed from.
func (h *rangeHandler) tombstones(gone []handover.ObjectRef) {
	if len(gone) == 0 {
		return
	}
	ctx := context.WithValue(context.Background(), claimKey{}, Claim{Range: h.ri.r, Epoch: h.ri.token})
	for _, o := range gone {
		h.call(ctx, func(ctx context.Context) { h.inner.OnDelete(ctx, h.reg.s.tombstoneIn(h.kr, o)) }, "")
	}
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

// versionOf is the resourceVersion of obj, or of a tombstone's object ("" if
// it has no metadata).
func versionOf(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, err := meta.Accessor(obj); err == nil {
		return m.GetResourceVersion()
	}
	return ""
}
