package sim

import (
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
)

var (
	flagSeeds  = flag.Int("sim.seeds", 0, "number of random seeds to run (default: 3000, 300 with -short or -race)")
	flagSeed   = flag.Uint64("sim.seed", 0, "first seed")
	flagSteps  = flag.Int("sim.steps", 120, "lines per random script before quiescence")
	flagScript = flag.String("sim.script", "", "replay a script: a file, or lines separated by ';'")
	flagUpdate = flag.Bool("sim.update", false, "rewrite the expected output of testdata/*.txt")
)

func seeds() int {
	if *flagSeeds > 0 {
		return *flagSeeds
	}
	if testing.Short() || raceEnabled {
		return 300
	}
	return 3000
}

// TestRandomSeeds runs random scripts; a failing seed prints its script.
func TestRandomSeeds(t *testing.T) {
	if *flagScript != "" {
		t.Skip("replaying -sim.script (TestReplay)")
	}
	n, failed := seeds(), 0
	seen := map[string]bool{}
	for i := range n {
		seed := *flagSeed + uint64(i)
		s := Random(seed, *flagSteps)
		reached(s, seen)
		if err := s.Err(); err != "" {
			failed++
			t.Errorf("seed %d: %s\nreplay with: go test ./internal/sim/ -run TestReplay -v -sim.script '%s'\nshrunk: '%s'",
				seed, err, FormatScript(s.Lines), FormatScript(Shrink(s.Lines)))
			if failed == 3 {
				t.Fatal("stopping after 3 failing seeds")
			}
		}
	}
	if n >= 300 {
		for _, p := range hardPaths {
			if !seen[p] {
				t.Errorf("%d random scripts never reached: %s", n, p)
			}
		}
	}
}

// TestReplay replays -sim.script.
func TestReplay(t *testing.T) {
	if *flagScript == "" {
		t.Skip("no -sim.script given")
	}
	text := *flagScript
	if b, err := os.ReadFile(text); err == nil {
		text = string(b)
		if i := strings.Index(text, "\n----\n"); i >= 0 {
			text = text[:i]
		}
	}
	s := New()
	err := s.Run(ParseScript(text))
	for _, c := range s.Calls {
		t.Log(c)
	}
	if err != "" {
		t.Fatal(err)
	}
}

// TestReplayMatchesRandom: replaying a random run's script gives the same
// verdict and the same handler calls, resyncs aside, as a multiset. The
// cores iterate maps: the order of a relist's tombstones, of a late
// handler's initial adds and of a resync's deltas may vary between runs,
// and with it which resync notifications fall in a batch sent before or
// after a resync check changes the set of listeners due.
func TestReplayMatchesRandom(t *testing.T) {
	n := uint64(50)
	if testing.Short() || raceEnabled {
		n = 20
	}
	for seed := range n {
		r := Random(seed, *flagSteps)
		p := New()
		p.Run(r.Lines)
		if r.Err() != p.Err() {
			t.Fatalf("seed %d: random run %q, replay %q", seed, r.Err(), p.Err())
		}
		a, b := nonSync(r.Calls), nonSync(p.Calls)
		if !slices.Equal(a, b) {
			t.Fatalf("seed %d: replay made other handler calls:\n%v\n%v", seed, a, b)
		}
	}
}

func nonSync(calls []string) []string {
	var out []string
	for _, c := range calls {
		f := strings.Fields(c)
		if f[1] == "update" {
			if rv := strings.Split(f[3], "->"); rv[0] == rv[1] {
				continue
			}
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// TestChecksCatchLostMessages: a message lost anywhere is caught.
func TestChecksCatchLostMessages(t *testing.T) {
	const prefix = "batch 1; handler h1; create a; create b; start; quiesce; delete a; update b; flush; "
	for _, tc := range []struct{ script, want string }{
		{"lose reflector; quiesce", "quiescent: cache differs from the source"},
		{"deliver reflector; lose fifo; quiesce", "quiescent: cache differs from the source"},
		{"deliver reflector; deliver fifo; lose indexer; quiesce", "quiescent: cache differs from the source"},
		{"deliver reflector; deliver fifo; deliver indexer; lose fifo; quiesce", "quiescent: cache differs from the source"},
		{"deliver reflector; deliver fifo; deliver indexer; lose h1; quiesce", "h1: backlog 1 and pending 0, mailbox holds 0"},
	} {
		s := New()
		err := s.Run(ParseScript(prefix + tc.script))
		if !strings.Contains(err, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.script, err, tc.want)
		}
	}
}

// reached records the paths a passing random script went through, so that
// passing seeds are known to mean something.
func reached(s *Sim, seen map[string]bool) {
	if s.ix.sawMarker {
		seen["indexer compaction (DrainMarker)"] = true
	}
	if s.reflStatus.Syncs > 1 {
		seen["relist"] = true
	}
	if s.reflStatus.LastSyncUsedWatchList {
		seen["WatchList sync"] = true
	}
	for _, c := range s.Calls {
		if strings.HasSuffix(c, " tombstone") {
			seen["tombstone"] = true
		}
	}
	for _, l := range s.Lines {
		if f := strings.Fields(l); f[0] == "restart" || f[0] == "add" || f[0] == "remove" || f[0] == "panic" {
			seen[f[0]] = true
			if f[0] == "restart" {
				if l := s.listenerByName(f[1]); l != nil && l.st.coalesced() {
					seen["restart of a coalesced listener"] = true
				}
			}
		}
	}
	if s.ix.panics > 0 {
		seen["indexer panic mid-batch"] = true
	}
	if s.det != nil {
		seen["cache mutation detector"] = true
	}
}

var hardPaths = []string{"indexer compaction (DrainMarker)", "relist", "WatchList sync", "tombstone", "restart", "add", "remove", "panic",
	"restart of a coalesced listener", "indexer panic mid-batch", "cache mutation detector"}
