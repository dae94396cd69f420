package sim

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/actorinformer/actorinformer/reflector"
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

// indexerPanicScript: h1 holds a; b is created, a updated and c created;
// the indexer panics while applying the batch with all three (in the
// mutation detector, right after b is written to the cache); later the
// watch gets a 410 and the reflector relists.
const indexerPanicScript = "handler h1; create a; start; quiesce; create b; update a; create c; flush; deliver reflector; deliver fifo; crash 0; deliver indexer; quiesce; gone; quiesce"

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

// TestIndexerPanicMidBatchAppliesTheRest: when applying a batch panics (a
// bug of ours: user index functions are recovered in the store), the
// restarted indexer actor has its core send the notifications of the
// deltas handled before the panic, and the new actor's Started applies the
// rest of the batch, sends their notifications and acknowledges the batch:
// the handlers get every change at once, not after the next relist. (The
// restart used to acknowledge the applied part only: c stayed out of the
// cache and of h1's view until the relist.) Replay with
//
//	go test ./internal/sim/ -run TestReplay -v -sim.script '<indexerPanicScript>'
func TestIndexerPanicMidBatchAppliesTheRest(t *testing.T) {
	s := New()
	lines := ParseScript(indexerPanicScript)
	gone := slices.Index(lines, "gone")
	errs := runAll(s, lines[:gone])
	if len(errs) > 0 {
		t.Errorf("violations: %q", errs)
	}
	if s.ix.crash.after != -1 {
		t.Fatalf("the injected panic did not happen (crash.after = %d)", s.ix.crash.after)
	}
	if len(s.ix.recoveryLogs) != 1 || !strings.Contains(s.ix.recoveryLogs[0], "panicked") || !strings.Contains(s.ix.recoveryLogs[0], "partly applied") {
		t.Errorf("logged while recovering: %q, want the one error saying the batch panicked and was partly applied", s.ix.recoveryLogs)
	}
	// Before any relist: the one list of the start.
	want := []string{"h1 add ns/a 2 initial", "h1 add ns/b 3", "h1 update ns/a 2->4", "h1 add ns/c 5"}
	if !slices.Equal(s.Calls, want) || s.reflStatus.Syncs != 1 {
		t.Errorf("calls %q after %d lists, want %q after the first", s.Calls, s.reflStatus.Syncs, want)
	}
	if errs := runAll(s, lines[gone:]); len(errs) > 0 || len(s.ls[0].view.objs) != 3 {
		t.Fatalf("after the relist: %v, view %v", errs, s.ls[0].view.objs)
	}
}

// TestCoalescedListenerRestartKeepsKey: a Coalesced handler's listener
// that restarts (protoactor stops its children first, and a stopped actor
// drops its queued messages) hands the key its runner had not taken to the
// new runner, so that the handler gets its calls. (It used to lose it: the
// handler never got b's add, and the counters kept it.)
func TestCoalescedListenerRestartKeepsKey(t *testing.T) {
	s := New()
	script := "handler h2 coalesced; create b; start; deliver indexer; answer; deliver reflector; deliver fifo; deliver indexer; deliver indexer; deliver h2; restart h2; quiesce"
	if err := s.Run(ParseScript(script)); err != "" {
		t.Fatal(err)
	}
	if want := []string{"h2 add ns/b 2 initial"}; !slices.Equal(s.Calls, want) {
		t.Errorf("calls %q, want %q", s.Calls, want)
	}
	// The runner had taken the key when the listener restarted: its
	// answer comes, and nothing is called twice.
	s = New()
	script = "handler h2 coalesced; create b; create c; start; deliver indexer; answer; deliver reflector; deliver fifo; deliver indexer; deliver indexer; deliver h2; deliver h2.runner; restart h2; quiesce"
	if err := s.Run(ParseScript(script)); err != "" {
		t.Fatal(err)
	}
	if want := []string{"h2 add ns/b 2 initial", "h2 add ns/c 3 initial"}; !slices.Equal(s.Calls, want) {
		t.Errorf("calls %q, want %q", s.Calls, want)
	}
}

// TestCoalescedDeleteAfterRelistReplace: a relist finds an object
// recreated (the indexer then sends, as client-go's, an update from the
// old UID to the new one) and the new object is deleted before a Coalesced
// handler had that update. The handler never saw the new object: it gets
// the delete of the one it saw, as a cache.DeletedFinalStateUnknown
// holding it, as client-go tells a handler of an object a relist found
// gone; never the delete of a UID it did not see (the view checks it).
func TestCoalescedDeleteAfterRelistReplace(t *testing.T) {
	s := New()
	script := "handler h1 coalesced; create a; create f; start; quiesce; update a; delete f; create f; restart reflector; answer; deliver reflector; deliver fifo; deliver indexer; deliver h1; delete f; answer; flush; deliver reflector; deliver fifo; deliver indexer; deliver h1; quiesce"
	if err := s.Run(ParseScript(script)); err != "" {
		t.Fatal(err)
	}
	// f was created at rv 3 (UID u3), recreated at rv 6 (UID u6), deleted
	// at rv 7: the handler, holding u3, gets the delete of u3.
	want := []string{"h1 add ns/a 2 initial", "h1 add ns/f 3 initial", "h1 update ns/a 2->4", "h1 delete ns/f 3 tombstone"}
	if !slices.Equal(s.Calls, want) {
		t.Errorf("calls %q, want %q", s.Calls, want)
	}
}

// TestFaultAtEveryBoundary injects each fault the pipeline must survive —
// a restart of any stage's actor, the indexer panicking in its next batch
// — before every message delivery of a few scripts, one fault per run:
// every invariant must hold after every line, and at quiescence.
func TestFaultAtEveryBoundary(t *testing.T) {
	scripts := []string{
		"batch 2; handler h1; handler h2 coalesced; create a; create b; start; quiesce; update a; delete b; create c; quiesce; update c; gone; quiesce",
		"watchlist; batch 1; resync 10s; handler h1 10s coalesced; handler h2; create a; start; quiesce; create b; delete a; advance 10s; quiesce; add h3 coalesced; update b; cut; quiesce",
	}
	faults := []string{"restart reflector", "restart fifo", "restart indexer", "restart h1", "restart h2", "restart h1.runner", "restart h2.runner", "crash 0", "crash 1"}
	runs := 0
	for _, script := range scripts {
		lines := ParseScript(script)
		base := New()
		if err := base.Run(lines); err != "" {
			t.Fatalf("%s: %s", script, err)
		}
		for k := range base.deliveries {
			for _, fault := range faults {
				s := New()
				s.beforeDelivery = func(n int) {
					if n != k {
						return
					}
					if _, err := s.addr(strings.Fields(fault)[1]); err == nil || fault[:5] == "crash" {
						if err := s.Exec(fault); err != nil {
							s.failf("%s: %v", fault, err)
						}
					}
				}
				runs++
				if err := s.Run(lines); err != "" {
					t.Fatalf("%s\nwith %q before delivery %d: %s", script, fault, k, err)
				}
			}
		}
	}
	t.Logf("%d runs", runs)
}

// TestWatchListWithoutBookmarkGivesUp: the reflector gives a WatchList
// stream without its initial-events-end bookmark up after 10 s of the fake
// clock, once, with a warning; WatchList stays off (see
// testdata/watchlist_no_bookmark.txt for the handler's calls). The same
// fallback over client-go's fake clientset, at real times:
// actors' TestWatchListOverFakeClientsetFallsBack.
func TestWatchListWithoutBookmarkGivesUp(t *testing.T) {
	s := New()
	b, err := os.ReadFile("testdata/watchlist_no_bookmark.txt")
	if err != nil {
		t.Fatal(err)
	}
	script, _, _ := strings.Cut(string(b), "\n----\n")
	if err := s.Run(ParseScript(script)); err != "" {
		t.Fatal(err)
	}
	if len(s.WatchListWarnings) != 1 || !strings.Contains(s.WatchListWarnings[0], "does not support WatchList") {
		t.Errorf("warnings %q, want the one giving WatchList up", s.WatchListWarnings)
	}
	if st := s.reflStatus; st.UseWatchList || st.LastSyncUsedWatchList || st.AwaitingInitialEventsEnd || st.Syncs != 1 {
		t.Errorf("status %+v, want WatchList off and one list", st)
	}
	if got := s.clk.Since(epoch); got < 10*time.Second || got >= 11*time.Second {
		t.Errorf("synced after %v of the fake clock, want 10 s", got)
	}
}

// TestForbiddenListNeverSyncs: a list the API server forbids is reported to
// the watch error handler and retried after a backoff (1 s, then 2 s in
// the simulator); nothing reaches the cache or a handler, and the informer
// never syncs, however many times it fails. Once a list is allowed, it
// syncs. The informer's API around it on a real actor system: actors'
// TestForbiddenListReportsAndNeverSyncs.
func TestForbiddenListNeverSyncs(t *testing.T) {
	s := New()
	lines := ParseScript("handler h1; create a; start")
	for range 4 {
		lines = append(lines, "answer 403", "deliver reflector", "tick", "deliver reflector")
	}
	if err := s.Run(lines); err != "" {
		t.Fatal(err)
	}
	if s.HandleErrors != 4 || !apierrors.IsForbidden(s.lastWatchErr) {
		t.Errorf("watch error handler called %d times, last with %v; want 4, forbidden", s.HandleErrors, s.lastWatchErr)
	}
	if got := s.clk.Since(epoch); got != 15*time.Second {
		t.Errorf("%v after start, want the backoffs' 1+2+4+8 s", got)
	}
	if _, ok := s.srv.call.(*reflector.ListRequest); !ok || s.q.hasSynced() || len(s.Calls) != 0 || len(s.ix.cache()) != 0 {
		t.Fatalf("after 4 forbidden lists: call %T, synced %v, calls %q, cache %v; want a list waiting and nothing else", s.srv.call, s.q.hasSynced(), s.Calls, s.ix.cache())
	}
	if err := s.Run(ParseScript("answer; quiesce")); err != "" {
		t.Fatal(err)
	}
	if want := []string{"h1 add ns/a 2 initial"}; !s.q.hasSynced() || !slices.Equal(s.Calls, want) {
		t.Errorf("once allowed: synced %v, calls %q; want synced, %q", s.q.hasSynced(), s.Calls, want)
	}
}
