package handover_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// The mutation check: each mutant below breaks one rule of the core (a
// source edit applied with go's -overlay, the tree is not touched), and
// this package's tests must fail on every one of them. A mutant that
// survives means a rule the tests do not hold. hack/test.sh runs it.
//
// (The core once had a split-brain resolver: a member that heard another
// deliver a range its view gave the other stopped delivering it. With
// fencing two members never deliver one range at once, so it was dead code,
// and went with its mutant.)

var runMutants = flag.Bool("handover.mutants", false, "run the mutation check")

type mutant struct {
	name      string
	file      string // in this package
	from, to  string // from must occur exactly once in file
	mustMatch string // optional: what the failing run must say
}

var mutants = []mutant{
	{
		name: "discovery stops waiting for a node whose Hello does not hear this member",
		file: "membership.go",
		from: "\tif !unreachable(p) {\n\t\t// Discovery waits",
		to:   "\tif true {\n\t\t// Discovery waits",
	},
	{
		name: "a member that begins to hear a peer does not tell it",
		file: "membership.go",
		from: "(!m.Reply || !wasHeard)",
		to:   "(!m.Reply && wasHeard == wasHeard)",
	},
	{
		name: "a release's drain is ended a tick late",
		file: "ranges.go",
		from: "c.ticks-d.at >= c.cfg.DrainTicks",
		to:   "c.ticks-d.at > c.cfg.DrainTicks",
	},
	{
		name: "a release's drain is ended at every tick after its bound",
		file: "ranges.go",
		from: "d.timeUp = true",
		to:   "d.timeUp = false",
	},
	{
		name: "a dead letter from a record's holder counts as its answer",
		file: "core.go",
		from: "case *Undeliverable:\n\t\t// Not an answer: the ask is repeated at the next tick.",
		to:   "case *Undeliverable:\n\t\tfor r := range c.ranges {\n\t\t\tif c.ranges[r].rec.Holder == m.Member {\n\t\t\t\tc.ranges[r].free = c.ranges[r].rec.Gen\n\t\t\t}\n\t\t}",
	},
	{
		name: "handlers are called past the renew deadline",
		file: "fence.go",
		from: "if until := m.Start + c.cfg.RenewDeadline; until > l.validUntil {",
		to:   "if until := m.Start + 10*c.cfg.LeaseDuration; until > l.validUntil {",
	},
	{
		name: "a lease is revoked without waiting for the lease duration",
		file: "fence.go",
		from: "c.now-p.seenAt >= c.cfg.LeaseDuration",
		to:   "c.now-p.seenAt >= c.cfg.RetryPeriod",
	},
	{
		name: "a failed revocation counts",
		file: "fence.go",
		from: "\tp.revoking = false\n\tif m.OK {\n\t\tp.void = true\n\t}",
		to:   "\tp.revoking = false\n\tp.void = true",
	},
	{
		name: "a claim that lapsed is not fenced",
		file: "fence.go",
		from: "if l.created && c.now >= l.validUntil {",
		to:   "if false && l.created && c.now >= l.validUntil {",
	},
	{
		name: "a failed revocation is tried again forever",
		file: "fence.go",
		from: "if !m.OK && !p.checking {",
		to:   "if false {",
	},
	{
		name: "a member left out of a peer's view does not rejoin",
		file: "membership.go",
		from: "c.ticks-p.excludedAt >= c.cfg.HealTicks {",
		to:   "c.ticks-p.excludedAt >= c.cfg.HealTicks && false {",
	},
	{
		name: "the owners stand when only the holders change",
		file: "membership.go",
		from: "slices.Equal(view, ms.placedView) && slices.Equal(holders, ms.placedHolders)",
		to:   "slices.Equal(view, ms.placedView)",
	},
	{
		name: "a range its holder lists moves as a delivered one does",
		file: "assign.go",
		from: "if i < capOf[m] || lists(r) {",
		to:   "if i < capOf[m] {",
	},
	{
		name: "a member's Hellos do not say what it lists",
		file: "membership.go",
		from: "listing = append(listing, r)",
		to:   "_ = r",
	},
	{
		name: "a member's peers learn of its cold start at its next heartbeat",
		file: "ranges.go",
		from: "one that places it first would list it too.\n\t\t\tc.helloDue = true",
		to:   "one that places it first would list it too.",
	},
	{
		name: "a peer that is not current holds what it said it delivers or lists",
		file: "membership.go",
		from: "if !slices.Contains(said(p), r) || !ms.isCurrent(id) {",
		to:   "if !slices.Contains(said(p), r) {",
	},
	{
		name: "a release whose write failed is answered",
		file: "ranges.go",
		from: "case *deactivating, *claiming, *unrecorded:",
		to:   "case *deactivating, *claiming:",
	},
	{
		name: "a release whose write failed counts as written",
		file: "ranges.go",
		from: "if m.Unrecorded {\n\t\t\tri.state = &unrecorded{}",
		to:   "if false {\n\t\t\tri.state = &unrecorded{}",
	},
	{
		name: "a release whose write failed is not written again",
		file: "ranges.go",
		from: "ok && !st.writing {",
		to:   "ok && false {",
	},
	{
		name: "a leaver whose release's write fails waits for it past its leave's time",
		file: "core.go",
		from: "case *unrecorded:\n\t\t\tif !c.forced {",
		to:   "case *unrecorded:\n\t\t\tif true {",
	},
	{
		name: "a lease with no holder is deleted at once",
		file: "fence.go",
		from: "if c.now-st.seenAt >= c.cfg.StaleAge && (",
		to:   "if c.now-st.seenAt >= 0 && (",
	},
	{
		name: "a lease with no holder that changed is deleted on its first sight's age",
		file: "fence.go",
		from: "st == nil || st.version != sl.Version {",
		to:   "st == nil {",
	},
	{
		name: "a delete of a lease with no holder is sent once only",
		file: "fence.go",
		from: "(!st.sent || c.now-st.sentAt >= c.cfg.StaleAge)",
		to:   "(!st.sent)",
	},
	{
		name: "a lease with no holder gone from the snapshot is still deleted",
		file: "fence.go",
		from: "if !in[name] {",
		to:   "if false {",
	},
	{
		name: "a leaver waits until its leave's time is up",
		file: "core.go",
		from: "(c.leaving || c.failed != \"\") && c.allIdle() {",
		to:   "(c.leaving || c.failed != \"\") && c.allIdle() && (c.forced || c.failed != \"\") {",
	},
	{
		name: "a claim activates on a create after its lease was revoked",
		file: "fence.go",
		from: "if !l.created && l.seen != 0 && l.seen != m.Token {",
		to:   "if false && !l.created && l.seen != 0 && l.seen != m.Token {",
	},
	{
		name: "a lease deleted from the snapshot is void at once",
		file: "fence.go",
		from: "p.inSnapshot = false\n\t\t\tc.goneNow(p)",
		to:   "p.inSnapshot = false\n\t\t\tp.void = true",
	},
	{
		name: "a check that finds no lease makes it void at once",
		file: "fence.go",
		from: "someone deleted.\n\t\tc.goneNow(p)",
		to:   "someone deleted.\n\t\tp.void = true",
	},
	{
		name: "a released lease is not void",
		file: "fence.go",
		from: "p.inSnapshot, p.void = false, true",
		to:   "p.inSnapshot = false",
	},
	{
		name: "a peer this member cannot reach fences it by leaving it out",
		file: "membership.go",
		from: "p.state == Joined && !p.knowsMe && (c.members.isCurrent(id)",
		to:   "p.state == Joined && (c.members.isCurrent(id)",
	},
	{
		name: "a peer this member cannot reach is in its view",
		file: "membership.go",
		from: "p.state == Joined && ms.isCurrent(id) && !unreachable(p)",
		to:   "p.state == Joined && ms.isCurrent(id)",
	},
	{
		name: "a Hello says the receiver is heard although it was not lately",
		file: "membership.go",
		from: "return p != nil && p.heard && c.ticks-p.heardAt < hearTicks*c.cfg.HelloTicks",
		to:   "return p != nil && p.heard",
	},
	{
		name:      "a range no member delivers is listed before the member may ask for it",
		file:      "ranges.go",
		from:      "&& (from != \"\" || !c.inTransit(r) && c.ready()) {",
		to:        "&& (from != \"\" || !c.inTransit(r) && true) {",
		mustMatch: "Before its lease watch showed its lease: no ask",
	},
	{
		name: "a range a member delivers is copied only once this member may ask",
		file: "ranges.go",
		from: "&& (from != \"\" || !c.inTransit(r) && c.ready()) {",
		to:   "&& (from != \"\" || !c.inTransit(r)) && c.ready() {",
	},
	{
		name: "a record is claimed whoever it names",
		file: "ranges.go",
		from: "if h == \"\" || h == c.cfg.Self || c.isVoid(h) || ri.free >= ri.rec.Gen {",
		to:   "if true {",
	},
	{
		name: "a record naming a member whose lease is valid is claimed",
		file: "ranges.go",
		from: "if h == \"\" || h == c.cfg.Self || c.isVoid(h) || ri.free >= ri.rec.Gen {",
		to:   "if h == \"\" || h == c.cfg.Self || !c.isVoid(h) || ri.free >= ri.rec.Gen {",
	},
	{
		name: "a holder's answer frees any generation of its record",
		file: "ranges.go",
		from: "c.isVoid(h) || ri.free >= ri.rec.Gen {",
		to:   "c.isVoid(h) || ri.free > 0 {",
	},
	{
		name: "any member's answer frees the record's holder",
		file: "ranges.go",
		from: "rs.Holder == m.From && rs.Gen > ri.free && ri.rec.Holder == m.From {",
		to:   "rs.Gen > ri.free {",
	},
	{
		name: "a member that is not Gone counts as Gone",
		file: "ranges.go",
		from: "return p != nil && p.heard && p.state == Gone",
		to:   "return p != nil && p.heard",
	},
	{
		name: "members of another protocol do not hold claims back",
		file: "fence.go",
		from: "if l.other && l.known && !l.void {",
		to:   "if l.other && l.known && !l.void && false {",
	},
	{
		name: "a claim written after this member's claim lapsed activates",
		file: "ranges.go",
		from: "case res.OK && c.lease.validUntil > c.now:",
		to:   "case res.OK:",
	},
	{
		name: "a claim refused activates",
		file: "ranges.go",
		from: "case res.OK && c.lease.validUntil > c.now:",
		to:   "case res.Record.Gen > 0 && c.lease.validUntil > c.now:",
	},
	{
		name: "a delivering member answers at once, without draining",
		file: "ranges.go",
		from: "\t\tswitch ri.state.(type) {\n\t\tcase *active:\n\t\t\tswitch {",
		to:   "\t\tswitch ri.state.(type) {\n\t\tcase nil:\n\t\t\tswitch {",
	},
	{
		name: "releases to any asker",
		file: "ranges.go",
		from: "case c.owner(r) != id: // not the owner in this member's view: wait",
		to:   "case false:",
	},
	{
		name: "a range the view moved on waits for its holder forever",
		file: "ranges.go",
		from: "c.ticks-st.askedAt > staleAskTicks+1 || c.isVoid(st.asked)):",
		to:   "false || c.isVoid(st.asked)):",
	},
	{
		name: "a release's next places the range when another member claimed it",
		file: "membership.go",
		from: "(rec.Holder == \"\" || rec.Holder == rec.Next) && (rec.Next",
		to:   "(rec.Next",
	},
	{
		name: "a release for this member does not place the range with it",
		file: "membership.go",
		from: "(rec.Next == c.cfg.Self || c.members.isCurrent(rec.Next)) {",
		to:   "(rec.Next != c.cfg.Self && c.members.isCurrent(rec.Next)) {",
	},
	{
		name: "a release's next places the range though it is not current",
		file: "membership.go",
		from: "(rec.Next == c.cfg.Self || c.members.isCurrent(rec.Next)) {",
		to:   "(rec.Next == c.cfg.Self || true) {",
	},
	{
		name: "a release's next does not place the range",
		file: "membership.go",
		from: "if rec := c.ranges[r].rec; rec.Next != \"\" &&",
		to:   "if rec := c.ranges[r].rec; false &&",
	},
	{
		name: "a claim whose write failed is tried again at once",
		file: "ranges.go",
		from: "case !mine || !valid || c.ticks < st.retryAt:",
		to:   "case !mine || !valid:",
	},
	{
		name: "a range synced from its deliverer is asked for before its watch is live",
		file: "ranges.go",
		from: "if m.Live || st.live || st.from == \"\" {",
		to:   "if true {",
	},
	{
		name: "a synced range whose watch sends nothing is never asked for",
		file: "ranges.go",
		from: "st.listedAt > 0 && c.ticks-st.listedAt >= c.cfg.LiveTicks {",
		to:   "st.listedAt < 0 {",
	},
	{
		name: "a watch's first event reported before the sync is forgotten",
		file: "ranges.go",
		from: "default:\n\t\tst.live = true",
		to:   "default:",
	},
	{
		name: "a member answers an ask while its claim of the range is in flight",
		file: "ranges.go",
		from: "case *deactivating, *claiming, *unrecorded:",
		to:   "case *deactivating, *unrecorded:",
	},
	{
		name: "a range nobody delivers waits for its watch",
		file: "ranges.go",
		from: "if m.Live || st.live || st.from == \"\" {",
		to:   "if m.Live || st.live {",
	},
}

func TestMutants(t *testing.T) {
	if !*runMutants {
		t.Skip("the mutation check runs with -handover.mutants (hack/test.sh)")
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	hints, err := readKillers(filepath.Join(dir, killersFile))
	if err != nil {
		t.Fatal(err)
	}
	var killedMu sync.Mutex
	killed := map[string]string{} // mutant: the test that killed it
	// Each mutant builds the package's tests in a go command of its own and
	// runs them: as many mutants at once as there are CPUs.
	slots := make(chan struct{}, runtime.NumCPU())
	// After the parallel subtests.
	t.Cleanup(func() {
		if *updateKillers && !t.Failed() {
			if err := writeKillers(filepath.Join(dir, killersFile), killed); err != nil {
				t.Error(err)
			}
		}
	})
	for i, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			slots <- struct{}{}
			defer func() { <-slots }()
			if by := runMutant(t, dir, tmp, i, m, hints[m.name]); by != "" {
				killedMu.Lock()
				killed[m.name] = by
				killedMu.Unlock()
			}
		})
	}
}

// killersFile names, for each mutant, the test that killed it last: the
// check runs that test first, and the package's whole suite only when it
// does not kill the mutant (a test renamed, a mutant new or changed). A
// hint only orders the work: a mutant survives only if the whole suite
// passes with it. -handover.mutants.update rewrites the file from a run.
const killersFile = "testdata/mutants-killed-by.txt"

var updateKillers = flag.Bool("handover.mutants.update", false, "with -handover.mutants: rewrite "+killersFile+" with the test that killed each mutant")

// runMutant applies m, builds the package's tests with it and returns the
// test that killed it; it fails t if none did. The runs, each with
// -failfast and each only when the one before killed nothing: the hinted
// test alone; the whole suite with -short (fewer random seeds); the whole
// suite as hack/test.sh would run it without the mutant.
func runMutant(t *testing.T, dir, tmp string, i int, m mutant, hint string) string {
	src, err := os.ReadFile(filepath.Join(dir, m.file))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), m.from); n != 1 {
		t.Fatalf("the mutant's text occurs %d times in %s, want once: the core changed; update the mutant", n, m.file)
	}
	mutated := filepath.Join(tmp, strings.ReplaceAll(m.name, " ", "_")+".go")
	if err := os.WriteFile(mutated, []byte(strings.Replace(string(src), m.from, m.to, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(dir, m.file): mutated}})
	ov := filepath.Join(tmp, fmt.Sprintf("overlay%d.json", i))
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(tmp, fmt.Sprintf("mutant%d.test", i))
	build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "-overlay", ov, ".")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the mutant does not build: %v\n%s", err, tail(out))
	}
	defer os.Remove(bin)
	all := "^Test([^M]|M[^u])"
	runs := [][]string{{"-test.short", "-test.run", all}, {"-test.run", all}}
	if hint != "" {
		runs = append([][]string{{"-test.run", "^" + regexp.QuoteMeta(hint) + "$"}}, runs...)
	}
	for n, args := range runs {
		last := n == len(runs)-1
		cmd := exec.CommandContext(ctx, bin, append([]string{"-test.paniconexit0", "-test.count=1", "-test.failfast", "-handover.seeds", "1000"}, args...)...)
		cmd.Dir = dir // as go test runs it, with its -test.paniconexit0
		out, err := cmd.CombinedOutput()
		switch {
		case ctx.Err() != nil:
			t.Errorf("the mutant's run timed out:\n%s", tail(out))
			return ""
		case err == nil:
			if last {
				t.Errorf("the mutant survived: no test failed with it")
				return ""
			}
			continue
		case !strings.Contains(string(out), "--- FAIL"):
			t.Errorf("the mutant's run failed without a failing test:\n%s", tail(out))
			return ""
		case m.mustMatch != "" && !strings.Contains(string(out), m.mustMatch):
			if last {
				t.Errorf("the mutant was killed, but not by %q:\n%s", m.mustMatch, tail(out))
				return ""
			}
			continue
		}
		by := firstFail(out)
		if hint != "" && n > 0 {
			t.Logf("killed by: %s (not by %s, its test in %s)", by, hint, killersFile)
		} else {
			t.Logf("killed by: %s", by)
		}
		return by
	}
	return ""
}

// readKillers reads killersFile's lines, "mutant<TAB>test"; a missing file
// is no hint.
func readKillers(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	hints := map[string]string{}
	for n, l := range strings.Split(string(b), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		mutant, test, ok := strings.Cut(l, "\t")
		if !ok || mutant == "" || !strings.HasPrefix(test, "Test") || strings.ContainsAny(test, " \t") {
			return nil, fmt.Errorf("%s:%d: want \"mutant<TAB>TestName\", got %q", path, n+1, l)
		}
		hints[mutant] = test
	}
	return hints, nil
}

func writeKillers(path string, killed map[string]string) error {
	var b strings.Builder
	b.WriteString("# The test that killed each mutant of mutation_test.go, run first for it\n# (go test -run TestMutants . -handover.mutants -handover.mutants.update).\n")
	for _, m := range mutants {
		if by := killed[m.name]; by != "" {
			fmt.Fprintf(&b, "%s\t%s\n", m.name, by)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func tail(b []byte) string {
	s := string(b)
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	return s
}

// firstFail is the name of the first test that failed in b ("?" if none
// says so), down to its first failing subtest: a hint that names one file
// of testdata/core runs only that file.
func firstFail(b []byte) string {
	name := ""
	for _, l := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(strings.TrimSpace(l), "--- FAIL: "); ok {
			n, _, _ = strings.Cut(n, " ")
			switch {
			case name == "":
				name = n
			case strings.HasPrefix(n, name+"/"):
				name = n
			default:
				return name
			}
		}
	}
	if name == "" {
		return "?"
	}
	return name
}
