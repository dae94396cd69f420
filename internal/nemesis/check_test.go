package nemesis

import (
	"strings"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/internal/calllog"
	"github.com/actorinformer/actorinformer/internal/shardproc"
	"github.com/actorinformer/actorinformer/shard"
)

const ms = int64(time.Millisecond)

func rec(start, end int64, rg int, op calllog.Op, key, uid, rv string) calllog.Record {
	return calllog.Record{Start: start * ms, End: end * ms, Range: rg, Op: op, Key: key, UID: uid, RV: rv}
}

func own(at int64, rg int, op calllog.Op) calllog.Record {
	return calllog.Record{Start: at * ms, End: at*ms + 1, Range: rg, Op: op}
}

// clean is a run of two members and one range: a hands range 0 over to b
// at 20 ms (make-before-break), b ends it with the server's objects.
func clean() Input {
	return Input{
		Ranges: 1,
		Procs: []Proc{
			{Name: "a", Calls: []calllog.Record{
				own(1, 0, calllog.OpAcquire),
				rec(2, 3, 0, calllog.OpInitial, "ns/x", "ux", "5"),
				rec(4, 5, 0, calllog.OpInitial, "ns/y", "uy", "6"),
				rec(10, 11, 0, calllog.OpUpdate, "ns/x", "ux", "7"),
				rec(12, 13, 0, calllog.OpDelete, "ns/y", "uy", "8"),
				own(20, 0, calllog.OpRelease),
			}},
			{Name: "b", Calls: []calllog.Record{
				own(21, 0, calllog.OpAcquire),
				rec(22, 23, 0, calllog.OpInitial, "ns/x", "ux", "7"),
				rec(30, 31, 0, calllog.OpUpdate, "ns/x", "ux", "9"),
			}},
		},
		Faults:  []Fault{{Kind: Leave, Target: "a", Start: 15 * ms, End: 15 * ms}},
		Deletes: []Delete{{Key: "ns/y", UID: "uy", Start: 11 * ms, End: 12 * ms, OK: true}},
		Server:  map[string]Object{"ns/x": {UID: "ux", RV: "9"}},
		Final: []Final{{Name: "b", State: shardproc.State{Member: "B", Synced: true, View: []string{"B"}, Ranges: []int{0},
			Cache: map[string]string{"ns/x": "9"}, Handler: map[string]string{"ns/x": "9"}}}},
		Begin: 2 * ms,
		End:   40 * ms,
	}
}

func kinds(vs []Violation) string {
	var s []string
	for _, v := range vs {
		s = append(s, v.Kind)
	}
	return strings.Join(s, ",")
}

func TestCheckClean(t *testing.T) {
	res := Check(clean())
	if len(res.Violations) != 0 || len(res.Exemptions) != 0 {
		t.Fatalf("violations %v, exemptions %v; want none\n%s", res.Violations, res.Exemptions, res.Table())
	}
	if res.Calls != 6 || res.Switches != 1 {
		t.Errorf("%d calls, %d switches; want 6, 1", res.Calls, res.Switches)
	}
	// The handover's gap, from a's release to b's acquire, is the leave's.
	if len(res.Gaps) != 1 || res.Gaps[0].Fault != 0 || res.Gaps[0].Start != 20*ms+1 || res.Gaps[0].End != 21*ms {
		t.Errorf("gaps %+v, want one of range 0 from 20 ms to 21 ms, the leave's", res.Gaps)
	}
}

func TestCheckFindsEachViolation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(in *Input)
		want   string // the violation kinds found, in order
	}{
		{"overlap", func(in *Input) {
			in.Procs[1].Calls = append(in.Procs[1].Calls, rec(10, 12, 0, calllog.OpUpdate, "ns/x", "ux", "7"))
		}, VOverlap + "," + VInterleave},
		{"a zombie's call between the new owner's", func(in *Input) {
			in.Procs[0].Calls = append(in.Procs[0].Calls, rec(25, 26, 0, calllog.OpUpdate, "ns/x", "ux", "8"))
		}, VInterleave + "," + VInterleave},
		{"a member that calls before it acquires", func(in *Input) {
			in.Procs[1].Calls[0] = own(24, 0, calllog.OpAcquire)
		}, VInterleave},
		{"version back across members", func(in *Input) {
			in.Procs[1].Calls[1].RV = "6"
		}, VRVBack},
		{"version back in one member", func(in *Input) {
			in.Procs[0].Calls[3].RV = "4"
		}, VRVBack},
		{"missed delete", func(in *Input) {
			in.Procs[0].Calls = append(in.Procs[0].Calls[:4], in.Procs[0].Calls[5])
		}, VMissedDelete},
		{"missed delete the workload did not make", func(in *Input) {
			in.Procs[0].Calls = append(in.Procs[0].Calls[:4], in.Procs[0].Calls[5])
			in.Deletes = nil
		}, VMissedDelete},
		{"delete of a live object", func(in *Input) {
			in.Procs[1].Calls = append(in.Procs[1].Calls, rec(32, 33, 0, calllog.OpTombstone, "ns/x", "ux", "9"))
			in.Procs[1].Calls = append(in.Procs[1].Calls, rec(34, 35, 0, calllog.OpAdd, "ns/x", "ux", "9"))
		}, VDeleteOfLive},
		{"token back", func(in *Input) {
			for i := range in.Procs[0].Calls {
				in.Procs[0].Calls[i].Token = 2
			}
			for i := range in.Procs[1].Calls {
				in.Procs[1].Calls[i].Token = 1
			}
		}, VTokenBack + "," + VTokenBack},
		{"cache differs", func(in *Input) {
			in.Server["ns/x"] = Object{UID: "ux", RV: "10"}
		}, VEndState},
		{"range delivered by none", func(in *Input) {
			in.Final[0].State.Ranges = nil
		}, VEndState},
		{"no calls", func(in *Input) {
			in.Procs = nil
			in.Deletes = nil
		}, VNoCalls},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := clean()
			tc.change(&in)
			res := Check(in)
			got := kinds(res.Violations)
			// Order-independent for the test's purpose.
			if !sameKinds(got, tc.want) {
				t.Errorf("violations %q, want %q:\n%s", got, tc.want, res.Examples(5))
			}
		})
	}
}

func sameKinds(a, b string) bool {
	as, bs := strings.Split(a, ","), strings.Split(b, ",")
	if len(as) != len(bs) {
		return false
	}
	count := map[string]int{}
	for _, x := range as {
		count[x]++
	}
	for _, x := range bs {
		count[x]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

// crash is a run where a, which delivered ranges 0 and 1, is killed at
// 100 ms; b takes range 0 over at 130 ms and range 1 at 150 ms.
func crash(kind Kind) Input {
	in := Input{
		Ranges: 2,
		Procs: []Proc{
			{Name: "a", Exited: 100 * ms, Calls: []calllog.Record{
				own(1, 0, calllog.OpAcquire), own(1, 1, calllog.OpAcquire),
				rec(2, 3, 0, calllog.OpInitial, "ns/x", "ux", "5"),
				rec(4, 5, 1, calllog.OpInitial, "ns/y", "uy", "6"),
			}},
			{Name: "b", Calls: []calllog.Record{
				own(130, 0, calllog.OpAcquire),
				own(150, 1, calllog.OpAcquire),
			}},
		},
		Faults: []Fault{{Kind: kind, Target: "a", Start: 100 * ms, End: 100 * ms}},
		// x was deleted just before the kill, y in the gap.
		Deletes: []Delete{
			{Key: "ns/x", UID: "ux", Start: 97 * ms, End: 98 * ms, OK: true},
			{Key: "ns/y", UID: "uy", Start: 120 * ms, End: 121 * ms, OK: true},
		},
		Server: map[string]Object{},
		Final: []Final{{Name: "b", State: shardproc.State{Member: "B", Synced: true, View: []string{"B"}, Ranges: []int{0, 1},
			Cache: map[string]string{}, Handler: map[string]string{}}}},
		Begin: 10 * ms,
		End:   200 * ms,
	}
	return in
}

// After a crash, the new owner resumes from the lost member's position:
// a delete in the gap that follows, or just before it, that reached no
// OnDelete is a violation, whatever the fault; only a takeover that logged
// that it could not replay from the position exempts a delete made before.
func TestCheckCrashGap(t *testing.T) {
	for _, k := range []Kind{Kill, Leave, Pause, APICut, EtcdRestart} {
		if got := kinds(Check(crash(k)).Violations); got != VMissedDelete+","+VMissedDelete {
			t.Errorf("after %s: violations %q, want two missed deletes", k, got)
		}
	}
	in := crash(Kill)
	in.Procs[1].Events = []Event{{Name: EventResumeCutShort, At: 130 * ms, Range: 0}, {Name: EventResumeCutShort, At: 110 * ms, Range: 1}}
	res := Check(in)
	// x (range 0) was deleted at 97 ms, before b's cut-short resume of
	// range 0: exempt; y (range 1) at 120 ms, after that of range 1: not.
	if got := kinds(res.Violations); got != VMissedDelete || !strings.Contains(res.Violations[0].Detail, "ns/y") {
		t.Errorf("violations %q (%s), want y's missed delete", got, res.Examples(5))
	}
	if got := kinds(res.Exemptions); got != EResumeGap || !strings.Contains(res.Exemptions[0].Detail, "ns/x") {
		t.Errorf("exemptions %q, want x's resume gap", got)
	}
	fr := res.Faults[0]
	if fr.Takeover != 50*time.Millisecond || fr.Moved != 2 {
		t.Errorf("takeover %v of %d ranges, want 50ms of 2", fr.Takeover, fr.Moved)
	}
	if fr.Unserved[0] != 30*time.Millisecond || fr.Unserved[1] != 50*time.Millisecond {
		t.Errorf("unserved %v, want range 0 30ms, range 1 50ms", fr.Unserved)
	}
	if fr.Exemptions[EResumeGap] != 1 {
		t.Errorf("the fault's exemptions %v", fr.Exemptions)
	}

	// A range nobody takes over.
	in = crash(Kill)
	in.Procs[1].Calls = in.Procs[1].Calls[:1]
	in.Final[0].State.Ranges = []int{0}
	res = Check(in)
	if res.Faults[0].Takeover != -1 || !strings.Contains(kinds(res.Violations), VEndState) {
		t.Errorf("range 1 never taken over: takeover %v, violations %q", res.Faults[0].Takeover, kinds(res.Violations))
	}
	if g := res.Gaps[len(res.Gaps)-1]; !g.Open || g.Range != 1 {
		t.Errorf("last gap %+v, want range 1's, open", g)
	}
}

// TestCheckPause: a paused member's call that straddles its pause
// overlaps the new owner's: exempt, counted apart; its calls after the
// pause overlapping the new owner's are not. A lease-delete freezes its
// target too.
func TestCheckPause(t *testing.T) {
	for _, k := range []Kind{Pause, LeaseDelete} {
		t.Run(string(k), func(t *testing.T) { checkPause(t, k) })
	}
}

func checkPause(t *testing.T, k Kind) {
	in := crash(k)
	in.Procs[0].Exited = 0
	in.Procs[0].Frozen = []Interval{{100 * ms, 180 * ms}}
	in.Procs[0].Calls = append(in.Procs[0].Calls,
		rec(99, 181, 0, calllog.OpUpdate, "ns/x", "ux", "7"), // frozen mid-call
		rec(185, 186, 1, calllog.OpUpdate, "ns/y", "uy", "8"))
	in.Procs[1].Calls = append(in.Procs[1].Calls,
		rec(140, 141, 0, calllog.OpAdd, "ns/z", "uz", "9"),
		rec(184, 187, 1, calllog.OpAdd, "ns/w", "uw", "10"))
	in.Deletes = nil
	in.Server = map[string]Object{"ns/x": {"ux", "7"}, "ns/y": {"uy", "8"}, "ns/z": {"uz", "9"}, "ns/w": {"uw", "10"}}
	res := Check(in)
	if got := kinds(res.Exemptions); got != EFrozenCall {
		t.Errorf("exemptions %q, want one frozen call", got)
	}
	if res.Count(VOverlap) != 1 {
		t.Errorf("%d overlaps, want 1: %s", res.Count(VOverlap), res.Examples(5))
	}
	// a is alive at the end but not in the final states: not serving.
	if res.Count(VNotServing) != 1 {
		t.Errorf("%d not serving, want 1", res.Count(VNotServing))
	}
	if fr := res.Faults[0]; fr.Takeover != 50*time.Millisecond || fr.Moved != 2 {
		t.Errorf("takeover %v of %d, want 50ms of 2", fr.Takeover, fr.Moved)
	}
	in.Final = append(in.Final, Final{Name: "a", State: shardproc.State{Member: "A", View: []string{"A", "B"}}})
	if why := notServing(in, map[string]Final{"a": in.Final[1], "b": in.Final[0]}, "a"); !strings.Contains(why, "not in b's view") {
		t.Errorf("a not in b's view: %q", why)
	}
	in.Final[0].State.View = []string{"A", "B"}
	if why := notServing(in, map[string]Final{"a": in.Final[1], "b": in.Final[0]}, "a"); why != "delivers no range" {
		t.Errorf("a delivers nothing: %q", why)
	}
}

// resumed: b's handlers got the tombstones of x and y on taking ranges 0
// and 1 over (the deletes since a's position).
func resumed(in Input) Input {
	in.Procs[1].Calls = append(in.Procs[1].Calls,
		rec(131, 132, 0, calllog.OpDelete, "ns/x", "ux", "8"),
		rec(151, 152, 1, calllog.OpDelete, "ns/y", "uy", "9"))
	return in
}

// TestCheckLeavePause: a leaver frozen midway, its lease lapsing, is a
// crash to the others: its call frozen mid-way is exempt; it leaves, so
// it need not serve again.
func TestCheckLeavePause(t *testing.T) {
	in := resumed(crash(LeavePause))
	in.Procs[0].Exited = 190 * ms
	in.Procs[0].Frozen = []Interval{{100 * ms, 180 * ms}}
	in.Faults[0].End = 180 * ms
	in.Procs[0].Calls = append(in.Procs[0].Calls, rec(99, 181, 0, calllog.OpUpdate, "ns/z", "uz", "7"))
	in.Procs[1].Calls = append(in.Procs[1].Calls, rec(140, 141, 0, calllog.OpAdd, "ns/z", "uz", "7"))
	in.Server = map[string]Object{"ns/z": {"uz", "7"}}
	in.Final[0].State.Cache = map[string]string{"ns/z": "7"}
	in.Final[0].State.Handler = map[string]string{"ns/z": "7"}
	res := Check(in)
	if len(res.Violations) != 0 {
		t.Fatalf("violations: %s", res.Examples(5))
	}
	if got := kinds(res.Exemptions); got != EFrozenCall {
		t.Errorf("exemptions %q, want a frozen call", got)
	}
	if fr := res.Faults[0]; fr.Takeover != 50*time.Millisecond || fr.Moved != 2 {
		t.Errorf("takeover %v of %d, want 50ms of 2", fr.Takeover, fr.Moved)
	}
}

// TestCheckLeaveCut: a leaver whose answers are held until after it
// exited: the deletes in the gap reach the new owner's handlers, or are
// violations; it leaves, so it need not serve again.
func TestCheckLeaveCut(t *testing.T) {
	in := crash(LeaveCut)
	in.Faults[0].End = 180 * ms
	if n := Check(in).Count(VMissedDelete); n != 2 {
		t.Errorf("%d missed deletes, want the gap's and the one just before", n)
	}
	res := Check(resumed(in))
	if len(res.Violations) != 0 {
		t.Fatalf("violations: %s", res.Examples(5))
	}
	if fr := res.Faults[0]; fr.Takeover != 50*time.Millisecond || fr.Moved != 2 {
		t.Errorf("takeover %v of %d, want 50ms of 2", fr.Takeover, fr.Moved)
	}
}

// A member fenced during a bad-address fault is a violation unless it is
// the fault's target; a fence before or after the fault is none.
func TestCheckBadAddressFencesNoBystander(t *testing.T) {
	in := clean()
	in.Faults = []Fault{{Kind: BadAddress, Target: "c", Start: 5 * ms, End: 25 * ms}}
	in.Procs = append(in.Procs, Proc{Name: "c"})
	fence := func(at int64) Event { return Event{Name: EventFence, At: at * ms, Range: -1} }
	in.Procs[2].Events = []Event{fence(10)}
	in.Procs[1].Events = []Event{fence(2), fence(30)}
	in.Final = append(in.Final, Final{Name: "c", State: shardproc.State{Member: "C", Synced: true, View: []string{"B", "C"}}})
	in.Final[0].State.View = []string{"B", "C"}
	if n := Check(in).Count(VBystanderFenced); n != 0 {
		t.Fatalf("%d bystander fences, want none: the target's and those outside the fault's span", n)
	}
	in.Procs[1].Events = append(in.Procs[1].Events, fence(20))
	res := Check(in)
	if n := res.Count(VBystanderFenced); n != 1 {
		t.Fatalf("%d bystander fences, want b's at 20 ms: %s", n, res.Examples(5))
	}
}

func TestSubtract(t *testing.T) {
	got := subtract(Interval{0, 100}, []Interval{{10, 20}, {50, 150}})
	want := []Interval{{0, 10}, {20, 50}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("subtract: %v, want %v", got, want)
	}
}

func kindRec(r calllog.Record, kind string) calllog.Record {
	r.Kind = kind
	return r
}

// twoKinds is a run of a group of two kinds (ConfigMaps, the first, and
// Secrets): a delivers range 0 of both, hands it over to b at 20 ms, b
// ends it with the server's objects of both kinds.
func twoKinds() Input {
	sec := func(r calllog.Record) calllog.Record { return kindRec(r, OwnedKind) }
	return Input{
		Ranges: 1,
		Procs: []Proc{
			{Name: "a", Calls: []calllog.Record{
				own(1, 0, calllog.OpAcquire), sec(own(1, 0, calllog.OpAcquire)),
				rec(2, 3, 0, calllog.OpInitial, "ns/x", "ux", "5"),
				sec(rec(2, 4, 0, calllog.OpInitial, "ns/s", "us", "6")),
				rec(10, 11, 0, calllog.OpUpdate, "ns/x", "ux", "7"),
				sec(rec(12, 13, 0, calllog.OpUpdate, "ns/s", "us", "8")),
				own(20, 0, calllog.OpRelease), sec(own(20, 0, calllog.OpRelease)),
			}},
			{Name: "b", Calls: []calllog.Record{
				own(21, 0, calllog.OpAcquire), sec(own(21, 0, calllog.OpAcquire)),
				rec(22, 23, 0, calllog.OpInitial, "ns/x", "ux", "7"),
				sec(rec(22, 24, 0, calllog.OpInitial, "ns/s", "us", "8")),
				sec(rec(30, 31, 0, calllog.OpUpdate, "ns/s", "us", "9")),
			}},
		},
		Faults: []Fault{{Kind: Leave, Target: "a", Start: 15 * ms, End: 15 * ms}},
		Server: map[string]Object{"ns/x": {UID: "ux", RV: "7"}, "secrets:ns/s": {UID: "us", RV: "9"}},
		Final: []Final{{Name: "b", State: shardproc.State{Member: "B", Synced: true, View: []string{"B"}, Ranges: []int{0},
			Cache: map[string]string{"ns/x": "7", "secrets:ns/s": "9"}, Handler: map[string]string{"ns/x": "7", "secrets:ns/s": "9"}}}},
		Begin: 2 * ms,
		End:   40 * ms,
	}
}

// TestCheckKindsApart: a range's two kinds handed over together pass; the
// kinds of a range delivered by two members at once, or an added kind's
// calls going on after its member released the range's first kind, are
// kinds-apart violations, which the checks of each kind alone miss.
func TestCheckKindsApart(t *testing.T) {
	res := Check(twoKinds())
	if len(res.Violations) != 0 || len(res.Exemptions) != 0 {
		t.Fatalf("handed over together: violations %v, exemptions %v; want none\n%s", res.Violations, res.Exemptions, res.Table())
	}
	if res.Calls != 7 || res.CallsByKind[""] != 3 || res.CallsByKind[OwnedKind] != 4 {
		t.Errorf("%d calls, by kind %v; want 7: 3 of the first kind, 4 of the added", res.Calls, res.CallsByKind)
	}
	if Check(clean()).CallsByKind != nil {
		t.Errorf("one kind: calls by kind %v, want none", Check(clean()).CallsByKind)
	}

	for _, tc := range []struct {
		name   string
		change func(in *Input)
		want   int // kinds-apart violations
	}{
		// a delivers the ConfigMaps of range 0 until 20 ms, while b
		// delivers its Secrets from 1 ms: the Secrets' calls [2,4] and
		// [12,13] overlap or interleave a's ConfigMap calls (3), and are
		// made while b did not deliver the first kind (2).
		{"delivered apart", func(in *Input) {
			a := &in.Procs[0]
			a.Calls = []calllog.Record{a.Calls[0], a.Calls[2], a.Calls[4], a.Calls[6]}
			b := &in.Procs[1]
			b.Calls = []calllog.Record{
				kindRec(own(1, 0, calllog.OpAcquire), OwnedKind),
				kindRec(rec(2, 4, 0, calllog.OpInitial, "ns/s", "us", "6"), OwnedKind),
				kindRec(rec(12, 13, 0, calllog.OpUpdate, "ns/s", "us", "8"), OwnedKind),
				b.Calls[0], b.Calls[2], b.Calls[4],
			}
		}, 5},
		// a releases the ConfigMaps at 20 ms but its Secrets' handler is
		// called at 25 ms, after b's first ConfigMap call and before its
		// next; b calls no Secret's handler, so only the kinds together
		// see it (a's call after b's, b's after a's, with no OnAcquire;
		// a's call outside its delivery).
		{"an added kind's call after the release", func(in *Input) {
			a := &in.Procs[0]
			a.Calls = append(a.Calls[:6:6], own(20, 0, calllog.OpRelease),
				kindRec(rec(25, 26, 0, calllog.OpUpdate, "ns/s", "us", "8"), OwnedKind),
				kindRec(own(27, 0, calllog.OpRelease), OwnedKind))
			b := &in.Procs[1]
			b.Calls = []calllog.Record{b.Calls[0], b.Calls[1], b.Calls[2], rec(28, 29, 0, calllog.OpUpdate, "ns/x", "ux", "8")}
			in.Server = map[string]Object{"ns/x": {UID: "ux", RV: "8"}, "secrets:ns/s": {UID: "us", RV: "8"}}
			st := &in.Final[0].State
			st.Cache = map[string]string{"ns/x": "8", "secrets:ns/s": "8"}
			st.Handler = st.Cache
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := twoKinds()
			tc.change(&in)
			res := Check(in)
			if n := res.Count(VKindsApart); n != tc.want || n != res.Count("") {
				t.Errorf("%d kinds-apart violations of %d; want %d and no other:\n%s", n, res.Count(""), tc.want, res.Examples(10))
			}
			if fr := res.Faults[0]; fr.Violations[VKindsApart] != tc.want-res.None.Violations[VKindsApart] {
				t.Errorf("the fault's kinds-apart count %d, before it %d; want %d in all", fr.Violations[VKindsApart], res.None.Violations[VKindsApart], tc.want)
			}
		})
	}
}

// Each range gets its namespaces, each named once.
func TestSpreadNamespaces(t *testing.T) {
	names := SpreadNamespaces("nemesis-1-pause", 16, NamespacesPerRange)
	count := map[int]int{}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Fatalf("%s twice", n)
		}
		seen[n] = true
		for rg := range 16 {
			if (shard.Range{Index: rg, Count: 16}).Contains(shard.Hash(n)) {
				count[rg]++
			}
		}
	}
	for rg := range 16 {
		if count[rg] != NamespacesPerRange {
			t.Errorf("range %d: %d namespaces, want %d", rg, count[rg], NamespacesPerRange)
		}
	}
}
