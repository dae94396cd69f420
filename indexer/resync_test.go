package indexer

import (
	"slices"
	"testing"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/stage"
)

// resyncRig drives a Core's resync checks on a fake clock, as the indexer
// actor would: it sets and stops the check timer the core asks for, the
// timer's callback records the tick's generation, and the test hands the
// tick back to the core after some delivery latency.
type resyncRig struct {
	t     *testing.T
	clk   *testingclock.FakeClock
	c     *Core
	fired []uint64
	start time.Time
	timer clock.Timer
}

// step hands msg to the core, performs what it sends to its timer, and
// returns the rest.
func (r *resyncRig) step(msg Input) []stage.Msg {
	var rest []stage.Msg
	for _, m := range r.c.Step(msg) {
		if m.To != checkTimer {
			rest = append(rest, m)
			continue
		}
		if r.timer != nil {
			r.timer.Stop()
			r.timer = nil
		}
		if b, ok := m.Body.(*stage.SetTimer); ok {
			gen := b.Fire.(*ResyncTick).Gen
			r.timer = r.clk.AfterFunc(b.After, func() { r.fired = append(r.fired, gen) })
		}
	}
	return rest
}

func newResyncRig(t *testing.T, check time.Duration) *resyncRig {
	r := &resyncRig{t: t, clk: testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	r.start = r.clk.Now()
	r.c = NewCore(NewStore(nil, nil).Writer(), Config{Clock: r.clk, ResyncCheckPeriod: check})
	return r
}

// at is the time elapsed on the fake clock since the rig was made.
func (r *resyncRig) at() time.Duration { return r.clk.Since(r.start) }

// check waits for the timer, which must fire exactly one check period after
// the previous check (or the start), lets latency pass and runs the check.
// It returns the listeners due.
func (r *resyncRig) check(latency time.Duration) []ListenerID {
	r.t.Helper()
	period := r.c.checkPeriod
	r.clk.Step(period - time.Nanosecond)
	if len(r.fired) != 0 {
		r.t.Fatalf("at %v: the check timer fired before its period", r.at())
	}
	r.clk.Step(time.Nanosecond)
	if len(r.fired) != 1 {
		r.t.Fatalf("at %v: the check timer fired %d times, want once", r.at(), len(r.fired))
	}
	gen := r.fired[0]
	r.fired = r.fired[:0]
	r.clk.Step(latency)
	due := len(r.step(&ResyncTick{Gen: gen})) > 0 // a Resync for the queue
	if due != (len(r.c.syncing) > 0) {
		r.t.Fatalf("at %v: ResyncCheck = %v with syncing %v", r.at(), due, r.c.syncing)
	}
	return slices.Clone(r.c.syncing)
}

// TestResyncChecksRunAtTheCheckPeriod: checks come every check period (the
// informer's, 1 s), not every smallest handler period; a 2 s and a 3 s
// handler resync at their multiples of it, a handler without a period never.
func TestResyncChecksRunAtTheCheckPeriod(t *testing.T) {
	r := newResyncRig(t, time.Second)
	r.c.Step(&Subscribe{ID: 1})
	r.c.Step(&Subscribe{ID: 2, ResyncPeriod: 2 * time.Second})
	r.c.Step(&Subscribe{ID: 3, ResyncPeriod: 3 * time.Second})
	r.step(&fifo.Listed{})
	want := map[int][]ListenerID{2: {2}, 3: {3}, 4: {2}, 6: {2, 3}, 8: {2}, 9: {3}}
	for i := 1; i <= 9; i++ {
		if got := r.check(0); !slices.Equal(got, want[i]) {
			t.Fatalf("check %d (at %v): due %v, want %v", i, r.at(), got, want[i])
		}
	}
}

// TestResyncChecksDoNotDrift: the timer is re-armed after each check, as
// client-go's reflector makes a new timer after each, so however late a tick
// is delivered, a handler whose period is the check period is due at every
// check. (A free-running ticker with next = check time + period finds it a
// little short at the next tick and skips it.)
func TestResyncChecksDoNotDrift(t *testing.T) {
	r := newResyncRig(t, 2*time.Second)
	r.c.Step(&Subscribe{ID: 1, ResyncPeriod: 2 * time.Second})
	r.step(&fifo.Listed{})
	for i, latency := range []time.Duration{30 * time.Millisecond, time.Millisecond, 0, 50 * time.Millisecond, 10 * time.Millisecond, 0} {
		if got := r.check(latency); !slices.Equal(got, []ListenerID{1}) {
			t.Fatalf("check %d (at %v, latency %v): due %v, want [1]", i+1, r.at(), latency, got)
		}
	}
}

// TestResyncFirstPeriodFromAdded: a handler's first period counts from when
// it was added (Subscribe.Added), as client-go's listener's nextResync.
func TestResyncFirstPeriodFromAdded(t *testing.T) {
	r := newResyncRig(t, time.Second)
	added := r.clk.Now()
	r.clk.Step(2 * time.Second) // Run comes 2 s after AddEventHandler
	r.c.Step(&Subscribe{ID: 1, ResyncPeriod: 3 * time.Second, Added: added})
	r.c.Step(&Subscribe{ID: 2, ResyncPeriod: 3 * time.Second}) // no Added: from now
	r.step(&fifo.Listed{})
	want := map[int][]ListenerID{1: {1}, 3: {2}, 4: {1}, 6: {2}}
	for i := 1; i <= 6; i++ {
		if got := r.check(0); !slices.Equal(got, want[i]) {
			t.Fatalf("check %d (at %v): due %v, want %v", i, r.at(), got, want[i])
		}
	}
}

// TestResyncNoCheckPeriod: with no check period (an informer whose default
// resync is 0) no timer is armed and every listener stays in the syncing
// set, as client-go's listeners, which no shouldResync ever takes out.
func TestResyncNoCheckPeriod(t *testing.T) {
	r := newResyncRig(t, 0)
	r.c.Step(&Subscribe{ID: 1, ResyncPeriod: time.Second})
	r.c.Step(&Subscribe{ID: 2})
	r.step(&fifo.Listed{})
	if r.clk.HasWaiters() {
		t.Fatal("a check timer is armed with no check period")
	}
	r.clk.Step(time.Hour)
	if len(r.fired) != 0 {
		t.Fatal("a check ran with no check period")
	}
	if !slices.Equal(r.c.syncing, []ListenerID{1, 2}) {
		t.Fatalf("syncing %v, want [1 2]", r.c.syncing)
	}
}

// TestResyncChecksWithoutResyncingListeners: the checks run even when no
// listener has a period, and the first one takes every listener out of the
// syncing set (client-go's shouldResync does).
func TestResyncChecksWithoutResyncingListeners(t *testing.T) {
	r := newResyncRig(t, time.Second)
	r.c.Step(&Subscribe{ID: 1})
	r.step(&fifo.Listed{})
	if !slices.Equal(r.c.syncing, []ListenerID{1}) {
		t.Fatalf("syncing before the first check %v, want [1]", r.c.syncing)
	}
	if got := r.check(0); len(got) != 0 {
		t.Fatalf("due %v, want none", got)
	}
	if got := r.check(0); len(got) != 0 {
		t.Fatalf("due %v at the second check, want none", got)
	}
}

// TestResyncChecksRestartAndStop: a new list restarts the timer from its
// time and makes an earlier tick stale; stopping disarms it; resuming re-arms
// it only if checks had started.
func TestResyncChecksRestartAndStop(t *testing.T) {
	r := newResyncRig(t, time.Second)
	r.step(Lifecycle(stage.Started))
	if r.clk.HasWaiters() {
		t.Fatal("resumed checks that never started")
	}
	r.c.Step(&Subscribe{ID: 1, ResyncPeriod: time.Second})
	r.step(&fifo.Listed{})
	r.clk.Step(time.Second)
	stale := r.fired[0]
	r.fired = nil
	r.clk.Step(300 * time.Millisecond)
	r.step(&fifo.Listed{}) // a relist before the tick was handled
	if len(r.step(&ResyncTick{Gen: stale})) > 0 {
		t.Fatal("a stale tick ran a check")
	}
	if r.clk.Waiters() != 1 {
		t.Fatalf("%d timers armed, want 1", r.clk.Waiters())
	}
	// The restarted timer fires one period after the relist, and the
	// listener (due since 1 s) resyncs then.
	if got := r.check(0); !slices.Equal(got, []ListenerID{1}) {
		t.Fatalf("due %v after the restart, want [1]", got)
	}
	r.step(Lifecycle(stage.Stopping))
	if r.clk.HasWaiters() {
		t.Fatal("a timer is armed after StopResyncChecks")
	}
	r.step(Lifecycle(stage.Started))
	if got := r.check(0); !slices.Equal(got, []ListenerID{1}) {
		t.Fatalf("due %v after resuming, want [1]", got)
	}
	// A manual check (ResyncDue) between two timer checks does not move
	// the timer.
	r.c.resyncDue(r.clk.Now())
	if got := r.check(0); !slices.Equal(got, []ListenerID{1}) {
		t.Fatalf("due %v, want [1]", got)
	}
}
