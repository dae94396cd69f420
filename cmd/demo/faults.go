package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Bounds on what a fault may ask, so that nothing sent to the demo's API
// can stall or exhaust it.
const (
	maxFaultDelay = 10 * time.Second // a slow handler's delay per event
	maxBurst      = 50000            // pods created by one burst
	defaultBurst  = 1000
	// goneDeletes is how many pods a "gone" fault deletes while the
	// informer's watch is down, so that its relist finds them missing and
	// hands tombstones to the handlers.
	goneDeletes = 5
)

// handlerFault is the fault injected into one handler at run time: a delay
// per event, a panic every n-th event, or a stop (every call waits until
// the handler is resumed). The zero value injects nothing; the hot path
// then costs one atomic load. Its methods may be called by multiple
// goroutines simultaneously.
type handlerFault struct {
	on         atomic.Bool
	delay      atomic.Int64 // nanoseconds
	panicEvery atomic.Int64
	calls      atomic.Int64 // calls since the panic fault was set
	// gate, when set, is closed when the handler is resumed; release is
	// closed when the demo ends, so that no call waits any more.
	gate    atomic.Pointer[chan struct{}]
	release <-chan struct{}
	mu      sync.Mutex // serialises writers
}

// apply injects the fault into one call.
func (f *handlerFault) apply() {
	if !f.on.Load() {
		return
	}
	if g := f.gate.Load(); g != nil {
		select {
		case <-*g:
		case <-f.release:
		}
	}
	if d := f.delay.Load(); d > 0 {
		t := time.NewTimer(time.Duration(d))
		select {
		case <-t.C:
		case <-f.release:
			t.Stop()
		}
	}
	if n := f.panicEvery.Load(); n > 0 {
		if c := f.calls.Add(1); c%n == 0 {
			panic(fmt.Sprintf("demo: injected panic on call %d", c))
		}
	}
}

func (f *handlerFault) setSlow(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay.Store(int64(d))
	f.on.Store(true)
}

func (f *handlerFault) setPanic(every int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls.Store(0)
	f.panicEvery.Store(every)
	f.on.Store(true)
}

func (f *handlerFault) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate.Load() == nil {
		g := make(chan struct{})
		f.gate.Store(&g)
	}
	f.on.Store(true)
}

// resume clears every fault and lets waiting calls go on.
func (f *handlerFault) resume() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on.Store(false)
	f.delay.Store(0)
	f.panicEvery.Store(0)
	if g := f.gate.Swap(nil); g != nil {
		close(*g)
	}
}

// String describes the fault for the page: "" when none.
func (f *handlerFault) String() string {
	if !f.on.Load() {
		return ""
	}
	var parts []string
	if f.gate.Load() != nil {
		parts = append(parts, "stopped")
	}
	if d := time.Duration(f.delay.Load()); d > 0 {
		parts = append(parts, "slow "+d.String())
	}
	if n := f.panicEvery.Load(); n > 0 {
		parts = append(parts, fmt.Sprintf("panic every %d", n))
	}
	return strings.Join(parts, ", ")
}

// faultRequest is a fault, as POST /api/faults and --fault ask for it.
// Member is the member of a sharded group a member fault (kill, leave,
// partition) applies to, or the one whose handler a handler fault applies
// to ("": that handler on every live member).
type faultRequest struct {
	Fault   string `json:"fault"`
	Handler string `json:"handler,omitempty"`
	Member  string `json:"member,omitempty"`
	DelayMs int64  `json:"delay_ms,omitempty"`
	Every   int64  `json:"every,omitempty"`
	Count   int    `json:"count,omitempty"`
	Seconds int    `json:"seconds,omitempty"`
}

// errBadFault is a fault request that cannot be applied as asked.
var errBadFault = errors.New("bad fault")

// The faults, by what they apply to.
const (
	handlerFaults = "slow, panic, stop, resume"
	clusterFaults = "cut-watch, gone, burst"
	memberFaults  = "kill, leave, add, partition"
	// defaultPartition is a partition's length when none is given.
	defaultPartition = 10 * time.Second
)

// injector applies faults to the demo's handlers, to the simulated
// cluster and to the members of a sharded group. Cluster faults run on the
// workload's goroutine (run's faults channel), so that the workload's view
// of the pods stays right.
type injector struct {
	handlers []*demoHandler // one informer's; with a group, the fleet's members'
	fleet    *fleet         // nil: one informer; member faults fail
	sim      *simCluster    // nil: not the simulated cluster; cluster faults fail
	load     chan<- func(*workload)
	release  chan struct{} // closed when the demo ends
	closed   sync.Once
}

// newInjector wires the handlers' faults to release, which close closes.
// load receives the cluster faults for the workload goroutine; nil without
// the simulated cluster.
func newInjector(hs []*demoHandler, fl *fleet, sim *simCluster, load chan<- func(*workload), release chan struct{}) *injector {
	in := &injector{handlers: hs, fleet: fl, sim: sim, load: load, release: release}
	for _, h := range hs {
		h.fault.release = in.release
	}
	return in
}

// close releases every waiting handler call; faults applied afterwards
// have no effect on handlers. Idempotent.
func (in *injector) close() { in.closed.Do(func() { close(in.release) }) }

// apply applies r and returns what it did. An error wrapping errBadFault
// means the request was wrong; others that it could not be applied now.
func (in *injector) apply(ctx context.Context, r faultRequest) (string, error) {
	switch r.Fault {
	case "slow", "panic", "stop", "resume":
		hs, where, err := in.handlersNamed(r.Handler, r.Member)
		if err != nil {
			return "", err
		}
		label := r.Handler + where
		switch r.Fault {
		case "slow":
			d := time.Duration(r.DelayMs) * time.Millisecond
			if r.DelayMs <= 0 || d > maxFaultDelay {
				return "", fmt.Errorf("%w: delay_ms must be in 1..%d", errBadFault, maxFaultDelay.Milliseconds())
			}
			for _, h := range hs {
				h.fault.setSlow(d)
			}
			return fmt.Sprintf("handler %s now takes %s more per event", label, d), nil
		case "panic":
			if r.Every <= 0 || r.Every > 1<<30 {
				return "", fmt.Errorf("%w: every must be in 1..%d", errBadFault, 1<<30)
			}
			for _, h := range hs {
				h.fault.setPanic(r.Every)
			}
			return fmt.Sprintf("handler %s now panics on every %d. event", label, r.Every), nil
		case "stop":
			for _, h := range hs {
				h.fault.stop()
			}
			return fmt.Sprintf("handler %s stopped: its events wait in its backlog until resume", label), nil
		default:
			for _, h := range hs {
				h.fault.resume()
			}
			return fmt.Sprintf("handler %s resumed, its faults cleared", label), nil
		}
	case "kill", "leave", "add", "partition":
		return in.applyMember(r)
	case "cut-watch", "gone", "burst":
		if in.sim == nil {
			return "", fmt.Errorf("%w: fault %q needs the simulated cluster", errBadFault, r.Fault)
		}
		switch r.Fault {
		case "cut-watch":
			n := in.sim.cutWatches()
			return fmt.Sprintf("cut %d watch(es): the reflector watches again from its last resource version", n), nil
		case "gone":
			var n int
			err := in.onWorkload(ctx, func(w *workload) { n = w.gone(goneDeletes) })
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("watch cut with 410 Gone and %d pods deleted meanwhile: the reflector relists, the handlers get tombstones", n), nil
		default:
			count := r.Count
			if count == 0 {
				count = defaultBurst
			}
			if count < 0 || count > maxBurst {
				return "", fmt.Errorf("%w: count must be in 1..%d", errBadFault, maxBurst)
			}
			var made int
			var werr error
			err := in.onWorkload(ctx, func(w *workload) {
				for made < count && werr == nil {
					werr = w.create()
					if werr == nil {
						made++
					}
				}
			})
			if err == nil {
				err = werr
			}
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("created %d pods at once", made), nil
		}
	case "":
		return "", fmt.Errorf("%w: no fault named (%s)", errBadFault, in.kinds())
	default:
		return "", fmt.Errorf("%w: unknown fault %q (%s)", errBadFault, r.Fault, in.kinds())
	}
}

// kinds lists the faults.
func (in *injector) kinds() string {
	return handlerFaults + ", " + clusterFaults + ", " + memberFaults
}

// applyMember applies a member fault.
func (in *injector) applyMember(r faultRequest) (string, error) {
	f := in.fleet
	if f == nil {
		return "", fmt.Errorf("%w: fault %q needs a sharded group (--members 2 or more)", errBadFault, r.Fault)
	}
	if r.Fault != "partition" && r.Seconds != 0 {
		return "", fmt.Errorf("%w: only partition takes seconds", errBadFault)
	}
	switch r.Fault {
	case "add":
		if r.Member != "" {
			return "", fmt.Errorf("%w: add takes no member: the new one is named after the last", errBadFault)
		}
		m, err := f.add()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("member %s joins: it lists the ranges it takes, then asks their owners for them", m.name), nil
	case "kill":
		m, err := f.kill(r.Member)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("member %s killed: it delivers nothing more and said no goodbye; the provider drops it in %s, then the others list its ranges and serve them",
			m.name, fmtDuration(f.cfg.memberTTL)), nil
	case "leave":
		m, err := f.leave(r.Member)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("member %s leaves: the others list its ranges, then it releases each once its handlers' calls on it have ended", m.name), nil
	default:
		d := defaultPartition
		if r.Seconds != 0 {
			d = time.Duration(r.Seconds) * time.Second
		}
		if d <= 0 || d > maxPartition {
			return "", fmt.Errorf("%w: seconds must be in 1..%d", errBadFault, int(maxPartition.Seconds()))
		}
		m, err := f.partitionMember(r.Member, d)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("member %s partitioned for %s: every message between it and the others is dropped; the provider still lists it", m.name, d), nil
	}
}

// onWorkload runs f on the workload's goroutine and waits for it.
func (in *injector) onWorkload(ctx context.Context, f func(*workload)) error {
	done := make(chan struct{})
	select {
	case in.load <- func(w *workload) { defer close(done); f(w) }:
	case <-ctx.Done():
		return fmt.Errorf("the workload is not running: %w", ctx.Err())
	case <-in.release:
		return errors.New("the demo is stopping")
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the fault is still running: %w", ctx.Err())
	}
}

// handlersNamed returns the handlers named name: the one informer's, or
// with a group that of member, or of every live member when member is "".
// where says which, for the answer.
func (in *injector) handlersNamed(name, member string) ([]*demoHandler, string, error) {
	hs := in.handlers
	where := ""
	if in.fleet != nil {
		if member != "" {
			m, err := in.fleet.byName(member)
			if err != nil {
				return nil, "", err
			}
			if st, _ := m.getState(); st != memberLive {
				return nil, "", fmt.Errorf("%w: member %s is %s", errConflict, member, st)
			}
			hs, where = m.handlers, " of member "+member
		} else {
			hs, where = nil, " of every member"
			for _, m := range in.fleet.live() {
				hs = append(hs, m.handlers...)
			}
		}
	} else if member != "" {
		return nil, "", fmt.Errorf("%w: member %q: there is one informer, no group (--members)", errBadFault, member)
	}
	var out []*demoHandler
	var names []string
	for _, h := range hs {
		if h.label == name {
			out = append(out, h)
		}
		if !slices.Contains(names, h.label) {
			names = append(names, h.label)
		}
	}
	if len(out) == 0 {
		return nil, "", fmt.Errorf("%w: unknown handler %q (handlers: %s)", errBadFault, name, strings.Join(names, ", "))
	}
	return out, where, nil
}

// cutWatches stops every watch, as a dropped connection would: the
// reflector watches again from its last resource version. It returns how
// many were cut.
func (c *simCluster) cutWatches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for w := range c.watchers {
		if !w.stopped() {
			n++
		}
		w.Stop()
	}
	clear(c.watchers)
	return n
}

// gone cuts every watch, deletes up to n pods while nobody watches, and
// makes the next watch that resumes from a resource version fail with 410
// Gone, so that the reflector relists: its list lacks the deleted pods,
// which the informer hands to the handlers as tombstones. It returns how
// many pods it deleted. It runs on the workload's goroutine.
func (w *workload) gone(n int) int {
	c := w.cluster
	// All under the cluster's lock: no watch starts, and no list is
	// served, before the deletes are done.
	c.mu.Lock()
	defer c.mu.Unlock()
	for x := range c.watchers {
		x.Stop()
	}
	clear(c.watchers)
	c.gone = true
	deleted := 0
	for deleted < n && len(w.pods) > 0 {
		i := w.rng.IntN(len(w.pods))
		if err := c.deleteLocked(w.pods[i]); err != nil {
			break
		}
		w.removeAt(i)
		deleted++
	}
	return deleted
}

// parseFault parses --fault KIND[=VALUE][@EVERY]: cut-watch, gone, burst[=N]
// (N pods, default 1000), kill[=MEMBER], leave[=MEMBER], add, or
// partition[=[MEMBER:]DURATION] (default 10s); without a MEMBER, the live
// member that has run longest. Once after the informer synced, or every
// EVERY.
func parseFault(s string) (scheduledFault, error) {
	var f scheduledFault
	spec, every, hasEvery := strings.Cut(s, "@")
	if hasEvery {
		d, err := time.ParseDuration(every)
		if err != nil || d < 100*time.Millisecond {
			return f, fmt.Errorf("--fault %q: @EVERY must be a duration of at least 100ms", s)
		}
		f.every = d
	}
	kind, value, hasValue := strings.Cut(spec, "=")
	f.req.Fault = kind
	switch kind {
	case "cut-watch", "gone", "add":
		if hasValue {
			return f, fmt.Errorf("--fault %q: %s takes no =VALUE", s, kind)
		}
	case "burst":
		if hasValue {
			n, err := strconv.Atoi(value)
			if err != nil || n <= 0 || n > maxBurst {
				return f, fmt.Errorf("--fault %q: N must be in 1..%d", s, maxBurst)
			}
			f.req.Count = n
		}
	case "kill", "leave":
		if hasValue && value == "" {
			return f, fmt.Errorf("--fault %q: =MEMBER names a member, e.g. %s=m2", s, kind)
		}
		f.req.Member = value
	case "partition":
		member, dur, hasMember := strings.Cut(value, ":")
		if !hasMember {
			member, dur = "", value
		}
		if hasMember && member == "" {
			return f, fmt.Errorf("--fault %q: =MEMBER:DURATION names a member, e.g. partition=m2:10s", s)
		}
		f.req.Member = member
		if dur != "" {
			d, err := time.ParseDuration(dur)
			if err != nil || d < time.Second || d > maxPartition || d%time.Second != 0 {
				return f, fmt.Errorf("--fault %q: DURATION must be whole seconds in 1s..%s", s, maxPartition)
			}
			f.req.Seconds = int(d / time.Second)
		}
	default:
		return f, fmt.Errorf("--fault %q: KIND must be cut-watch, gone, burst, kill, leave, add or partition", s)
	}
	f.anyMember = f.memberFault() && kind != "add" && f.req.Member == ""
	return f, nil
}

// scheduledFault is one --fault.
type scheduledFault struct {
	req   faultRequest
	every time.Duration // 0: once
	// anyMember: a member fault with no member named, applied to the live
	// member that has run longest.
	anyMember bool
}

// clusterFault reports whether the fault applies to the simulated cluster.
func (f scheduledFault) clusterFault() bool {
	switch f.req.Fault {
	case "cut-watch", "gone", "burst":
		return true
	}
	return false
}

// memberFault reports whether the fault applies to a sharded group's
// members.
func (f scheduledFault) memberFault() bool {
	switch f.req.Fault {
	case "kill", "leave", "add", "partition":
		return true
	}
	return false
}

// faultFlags is the repeatable --fault flag.
type faultFlags []scheduledFault

func (f *faultFlags) String() string {
	var parts []string
	for _, x := range *f {
		parts = append(parts, x.req.Fault)
	}
	return strings.Join(parts, ",")
}

func (f *faultFlags) Set(s string) error {
	x, err := parseFault(s)
	if err != nil {
		return err
	}
	*f = append(*f, x)
	return nil
}

// runScheduled applies the --fault faults until ctx is done: each once at
// once, or every its period.
func (in *injector) runScheduled(ctx context.Context, faults []scheduledFault, logf func(string, ...any)) {
	var wg sync.WaitGroup
	for _, f := range faults {
		wg.Go(func() {
			for {
				req := f.req
				if f.anyMember && in.fleet != nil {
					if live := in.fleet.live(); len(live) > 0 {
						req.Member = live[0].name
					}
				}
				msg, err := in.apply(ctx, req)
				if err != nil {
					if ctx.Err() == nil {
						logf("fault %s: %v", f.req.Fault, err)
					}
				} else {
					logf("fault %s: %s", f.req.Fault, msg)
				}
				if f.every <= 0 {
					return
				}
				t := time.NewTimer(f.every)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		})
	}
	wg.Wait()
}

// goneError is the 410 the simulated cluster answers while a "gone" fault
// is pending.
func goneError(rv string) error {
	return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %s (injected 410 Gone)", rv))
}
