package sim

import (
	"slices"
	"testing"
)

// TestIndexerRestartKeepsResync: after a restart of the indexer actor,
// the resyncs go on. (The shell used to learn the queue's PID from the
// sender of a Batch or Listed and forget it when restarted: its checks
// then moved the handlers' next resync time on and sent no Resync until
// the next batch.)
func TestIndexerRestartKeepsResync(t *testing.T) {
	want := []string{"h1 add ns/a 2 initial", "h1 update ns/a 2->2", "h1 update ns/a 2->2", "h1 update ns/a 2->2"}
	for _, restart := range []string{"", "restart indexer; "} {
		s := New()
		script := "resync 30s; handler h1 30s; create a; start; quiesce; " + restart + "advance 30s; quiesce; advance 30s; quiesce; advance 30s; quiesce"
		if err := s.Run(ParseScript(script)); err != "" {
			t.Fatal(err)
		}
		if !slices.Equal(s.Calls, want) {
			t.Errorf("%s: calls %q, want %q", script, s.Calls, want)
		}
	}
}

// knownIndexerPanicScript: h1 holds a; b is created and a updated; the
// indexer panics while applying the batch with both (after writing a to
// the cache); later the watch gets a 410 and the reflector relists.
const knownIndexerPanicScript = "handler h1; create a; start; quiesce; create b; update a; flush; deliver reflector; deliver fifo; crash 1; deliver indexer; quiesce; gone; quiesce"

// runAll runs every line, collecting the violations of each (Run stops at
// the first).
func runAll(s *Sim, lines []string) []string {
	var errs []string
	s.keepGoing = true
	for _, l := range lines {
		if err := s.Exec(l); err != nil {
			errs = append(errs, err.Error())
		}
		errs = append(errs, s.errs...)
		s.errs = nil
	}
	return errs
}

// TestKnownIndexerPanicMidBatchDesyncsHandlers pins a weakness of the
// indexer shell's recovery. When applying a batch panics (a bug of ours:
// user index functions are recovered in the store), the restarted actor
// acknowledges the batch so that the queue goes on, as indexer/actor.go
// says; but the deltas written before the panic never reach the handlers,
// and the comment's "the next relist repairs the cache" does not hold for
// them: the relist finds the cache right, so h1 is told of b's relisted
// copy as an update of an object it never got an add for, and its view
// differs from the cache until then. A fix would have the restart send the
// lost notifications (or force a relist whose notifications are built
// against what the listeners were sent). Replay with
//
//	go test ./internal/sim/ -run TestReplay -v -sim.script '<knownIndexerPanicScript>'
func TestKnownIndexerPanicMidBatchDesyncsHandlers(t *testing.T) {
	s := New()
	errs := runAll(s, ParseScript(knownIndexerPanicScript))
	want := []string{
		`h1: view+mailbox differs from the cache: [ns/a: want rv "4", got "2" ns/b: missing (want rv "3")]`,
		`h1: update of unknown key ns/b`,
		`h1: update of ns/a from rv 4, handler had 2`,
	}
	for _, w := range want {
		if !slices.Contains(errs, w) {
			t.Errorf("violation %q not seen (fixed? then turn this into a test of the fix); got %q", w, errs)
		}
	}
	// After the relist, h1 holds what the source holds again.
	if d := s.Err(); d != "" || len(s.ls[0].view.objs) != 2 {
		t.Fatalf("after the relist: %v, view %v", d, s.ls[0].view.objs)
	}
}

// TestKnownCoalescedListenerRestartLosesKey pins a bug of the actors
// shell: a Coalesced handler's listener that restarts (protoactor stops
// its children first, and a stopped actor drops its queued messages) loses
// the pending key it had handed to its runner but the runner had not yet
// run: the handler never gets those notifications, and the backlog and
// pending counters keep them. The listener actor restarts only on a bug
// of ours (a message with no address), so random runs do not restart a
// coalesced listener.
func TestKnownCoalescedListenerRestartLosesKey(t *testing.T) {
	s := New()
	script := "handler h2 coalesced; create b; start; deliver indexer; answer; deliver reflector; deliver fifo; deliver indexer; deliver indexer; deliver h2; restart h2; quiesce"
	errs := runAll(s, ParseScript(script))
	if len(errs) == 0 {
		t.Fatalf("%s: no violation; the bug is fixed: turn this test into a regression test", script)
	}
	t.Logf("known violations: %q", errs)
}

// TestCoalescedDeleteAfterRelistReplace shows what a Coalesced handler is
// told when a relist finds an object recreated (the indexer then sends,
// as client-go's, an update from the old UID to the new one) and the new
// object is deleted before the handler had that update: the update is
// merged into the delete, so the handler, which holds the old UID, gets a
// delete of the new one, which it never saw. Per key its story is right;
// per UID it is not. The view accepts it only where the indexer itself
// sent a UID-changing update for the key.
func TestCoalescedDeleteAfterRelistReplace(t *testing.T) {
	s := New()
	script := "handler h1 coalesced; create a; create f; start; quiesce; update a; delete f; create f; restart reflector; answer; deliver reflector; deliver fifo; deliver indexer; deliver h1; delete f; answer; flush; deliver reflector; deliver fifo; deliver indexer; deliver h1; quiesce"
	if err := s.Run(ParseScript(script)); err != "" {
		t.Fatal(err)
	}
	// f was created at rv 3 (UID u3), recreated at rv 6 (UID u6), deleted
	// at rv 7: the handler, holding u3, gets the delete of u6.
	want := []string{"h1 add ns/a 2 initial", "h1 add ns/f 3 initial", "h1 update ns/a 2->4", "h1 delete ns/f 7"}
	if !slices.Equal(s.Calls, want) {
		t.Errorf("calls %q, want %q", s.Calls, want)
	}
}
