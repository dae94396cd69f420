package shard

import (
	"testing"
	"time"

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
