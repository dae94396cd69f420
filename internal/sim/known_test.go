package sim

import (
	"slices"
	"testing"
)

// knownIndexerRestartScript: an informer with a 30s resync and no change
// at the source; the indexer actor is restarted, then 90s pass.
const knownIndexerRestartScript = "resync 30s; handler h1 30s; create a; start; quiesce; restart indexer; advance 30s; quiesce; advance 30s; quiesce; advance 30s; quiesce"

// TestKnownIndexerRestartSkipsResync pins a bug: after a restart the
// indexer actor has forgotten the queue's PID (it learns it from the
// sender of a Batch or Listed), so its resync checks find the handler due,
// move its next resync time on, and send no Resync. Until the next batch,
// every resync is skipped: here none of the three due at 30s, 60s and 90s
// happens. client-go would resync h1 three times. The fix belongs in
// indexer/actor.go (keep the queue's PID outside the actor value, or give
// it to NewActor). Replay with
//
//	go test ./internal/sim/ -run TestReplay -v -sim.script '<knownIndexerRestartScript>'
func TestKnownIndexerRestartSkipsResync(t *testing.T) {
	s := New()
	if err := s.Run(ParseScript(knownIndexerRestartScript)); err != "" {
		t.Fatal(err)
	}
	// What happens today: the initial add only, no resync.
	if want := []string{"h1 add ns/a 2 initial"}; !slices.Equal(s.Calls, want) {
		t.Fatalf("calls %q, want (the current, wrong behaviour) %q: if resyncs now happen, the bug is fixed: turn this into a test of the fix", s.Calls, want)
	}
	// Without the restart, the same 90s give three resyncs.
	ok := New()
	if err := ok.Run(ParseScript("resync 30s; handler h1 30s; create a; start; quiesce; advance 30s; quiesce; advance 30s; quiesce; advance 30s; quiesce")); err != "" {
		t.Fatal(err)
	}
	if want := []string{"h1 add ns/a 2 initial", "h1 update ns/a 2->2", "h1 update ns/a 2->2", "h1 update ns/a 2->2"}; !slices.Equal(ok.Calls, want) {
		t.Fatalf("without restart: calls %q, want %q", ok.Calls, want)
	}
}
