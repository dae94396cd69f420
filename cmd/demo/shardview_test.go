package main

import (
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/shard"
)

// A handover's release is the previous owner's latest release of the
// range that began before the new owner delivered it, also when it ended
// after: the releaser's bookkeeping after its record's write races the
// new owner's claim and first call. Another member's release, one that
// began after the delivery, or one that ended more than releaseSlack
// before the new owner's attempt are not it.
func TestReleaseOf(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	start, delivered := t0.Add(time.Second), t0.Add(time.Second+100*time.Millisecond)
	rel := func(member string, at, took time.Duration) memberHandover {
		return memberHandover{member, shard.Handover{Start: t0.Add(at), Duration: took, Kind: "release"}}
	}
	for _, c := range []struct {
		name string
		rels []memberHandover
		want float64 // ms; 0: none
	}{
		{"ended before the attempt", []memberHandover{rel("m1", 0, 500*time.Millisecond)}, 500},
		{"ended after the delivery", []memberHandover{rel("m1", 900*time.Millisecond, 250*time.Millisecond)}, 250},
		{"the latest of two", []memberHandover{rel("m1", 0, 10*time.Millisecond), rel("m1", 800*time.Millisecond, 20*time.Millisecond)}, 20},
		{"another member's", []memberHandover{rel("m2", 900*time.Millisecond, 10*time.Millisecond)}, 0},
		{"begun after the delivery", []memberHandover{rel("m1", 2*time.Second, 10*time.Millisecond)}, 0},
		{"ended long before", []memberHandover{rel("m1", -releaseSlack, 10*time.Millisecond)}, 0},
	} {
		got := releaseOf(c.rels, "m1", start, delivered)
		switch {
		case c.want == 0 && got != nil:
			t.Errorf("%s: release %v ms, want none", c.name, *got)
		case c.want != 0 && (got == nil || *got != c.want):
			t.Errorf("%s: release %v, want %v ms", c.name, got, c.want)
		}
	}
}
