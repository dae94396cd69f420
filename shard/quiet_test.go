package shard

import (
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// A member is quiet only when settled with nothing moving and its claim
// outlasts a batch of ticks; a quiet batch never spans more than a lease
// retry period.
func TestQuietStatus(t *testing.T) {
	settled := func() *handover.Status {
		return &handover.Status{Settled: true, ValidUntil: 10 * time.Second,
			Ranges: []handover.RangeStatus{{State: "active"}, {State: "idle"}}}
	}
	if !quietStatus(settled(), 5*time.Second, time.Second) {
		t.Fatal("a settled member with a valid claim is not quiet")
	}
	for name, change := range map[string]func(*handover.Status){
		"not settled": func(s *handover.Status) { s.Settled = false },
		"discovering": func(s *handover.Status) { s.Discovering = true },
		"leaving":     func(s *handover.Status) { s.Leaving = true },
		"failed":      func(s *handover.Status) { s.Failed = "x" },
		"fenced":      func(s *handover.Status) { s.Fenced = "x" },
		"moving":      func(s *handover.Status) { s.Ranges[1].State = "acquiring" },
		"releasing":   func(s *handover.Status) { s.Ranges[0].State = "deactivating" },
		"claim ends":  func(s *handover.Status) { s.ValidUntil = 5*time.Second + 900*time.Millisecond },
	} {
		st := settled()
		change(st)
		if quietStatus(st, 5*time.Second, time.Second) {
			t.Errorf("%s: quiet", name)
		}
	}
	for _, c := range []struct {
		tick, retry time.Duration
		want        int
	}{{200 * time.Millisecond, time.Second, 5}, {200 * time.Millisecond, 500 * time.Millisecond, 2},
		{200 * time.Millisecond, 100 * time.Millisecond, 1}, {2 * time.Second, time.Second, 1}, {10 * time.Millisecond, 2 * time.Second, 100}} {
		if got := quietBatch(options{tick: c.tick, retry: c.retry}); got != c.want {
			t.Errorf("tick %v, retry %v: batch %d, want %d", c.tick, c.retry, got, c.want)
		}
	}
}

// The ticker sends one tick per interval; while the member is quiet, a
// batch at once; woken mid-batch, the ticks due so far, then one per
// interval again.
func TestTickerBatchesWhileQuiet(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	const every = 10 * time.Millisecond
	var quiet atomic.Bool
	wake, stop, done := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	sent := make(chan int, 16)
	go func() {
		defer close(done)
		ticker(clk, every, 5, &quiet, wake, stop, func(n int) bool { sent <- n; return true })
	}()
	defer func() { close(stop); <-done }()
	waiting := func() { // the ticker waits on its timer
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
	}
	expect := func(step string, want int) {
		t.Helper()
		select {
		case n := <-sent:
			if n != want {
				t.Fatalf("%s: %d ticks, want %d", step, n, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no ticks, want %d", step, want)
		}
	}
	waiting()
	clk.Step(every)
	expect("busy", 1)
	waiting()
	quiet.Store(true) // from the next wait on
	clk.Step(every)
	expect("the wait under way", 1)
	waiting()
	clk.Step(4 * every)
	select {
	case n := <-sent:
		t.Fatalf("quiet: %d ticks before the batch's end", n)
	default:
	}
	clk.Step(every)
	expect("quiet", 5)
	waiting()
	clk.Step(3 * every)
	quiet.Store(false)
	wake <- struct{}{}
	expect("woken 3 intervals into a batch", 3)
	waiting()
	clk.Step(every)
	expect("busy again", 1)
}

// The ticker ends when send says so.
func TestTickerEndsWhenSendRefuses(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	var quiet atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker(clk, time.Millisecond, 5, &quiet, nil, nil, func(int) bool { return false })
	}()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Millisecond)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the ticker still runs")
	}
}
