package nemesis

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/actorinformer/actorinformer/internal/calllog"
	"github.com/actorinformer/actorinformer/internal/shardproc"
)

// Kind is a kind of fault.
type Kind string

const (
	// Pause freezes a member with SIGSTOP for longer than the provider's
	// TTL, then resumes it with SIGCONT.
	Pause Kind = "pause"
	// Partition cuts a member from the other members, both ways, not from
	// etcd nor from the API server: no byte flows, connections stay open.
	Partition Kind = "partition"
	// PartitionReject is a partition whose connections are reset and
	// refused (protoactor answers with dead letters).
	PartitionReject Kind = "partition-reject"
	// EtcdCut cuts one member from etcd only (no byte flows).
	EtcdCut Kind = "etcd-cut"
	// APICut cuts one member from the API server only (no byte flows):
	// its watches stall, and it cannot write (renew a Lease).
	APICut Kind = "api-cut"
	// EtcdRestart kills etcd (SIGKILL) and starts it again; the API server
	// shares it.
	EtcdRestart Kind = "etcd-restart"
	// Kill kills a member with SIGKILL.
	Kill Kind = "kill"
	// Crash is not injected: a member process died by itself of
	// protoactor's etcd provider race (shardproc.ProviderRace), which a
	// member cannot avoid. The run records it when it sees the process
	// gone, at the time it exited, and checks it as a kill; the long run
	// replaces the member as it replaces a killed one.
	Crash Kind = "crash"
	// Leave stops a member with SIGTERM: a graceful leave.
	Leave Kind = "leave"
	// Join starts a member.
	Join Kind = "join"
	// JoinDuringDeletes starts a member during a burst of deletes.
	JoinDuringDeletes Kind = "join-deletes"
	// Rolling is a rolling update: for each member live at its start, a new
	// member joins, the group settles, and the old member leaves with
	// SIGTERM, then the group settles again.
	Rolling Kind = "rolling"
	// Flap starts a member and stops it with SIGTERM a random 0.3–2.8 s
	// later (FlapAfter, FlapSpread), while ranges move to it: it leaves with asks
	// unanswered, answers given, claims under way or handoffs not yet
	// used.
	Flap Kind = "flap"
	// LeaseDelete deletes a member's lease through the API server, as
	// kubectl delete lease would, while the member is frozen (SIGSTOP) for
	// LeaseDeleteHold, less than the renew deadline: it resumes with its
	// claim still valid, and the others must not take its ranges before it
	// stopped.
	LeaseDelete Kind = "lease-delete"
	// LeavePause stops a member with SIGTERM and freezes it (SIGSTOP) a
	// random 0–LeavePauseSpread later, while it hands its ranges over, for
	// longer than the provider's TTL and its lease duration, then resumes
	// it: its lease goes void mid-leave, its answers and handoffs arrive
	// late or never, and the others take its ranges without it.
	LeavePause Kind = "leave-pause"
	// LeaveCut stops a member with SIGTERM and, a random
	// 0–LeavePauseSpread later, while it hands its ranges over, holds what
	// it sends to the other members (a one-way Drop: it still hears them,
	// and reaches etcd and the API server) for LeaveCutHold: longer than
	// its leave's timeout and its lease duration. It answers asks into the
	// cut, its leave times out, it deletes its lease and exits, and the
	// others take its ranges without it; the answers and handoffs it sent
	// arrive after that, at the heal.
	LeaveCut Kind = "leave-cut"
	// BadAddress starts a member that no other member can reach: its
	// advertised address refuses every connection (a misconfigured
	// address, or a firewall one way), while it reaches them, etcd and the
	// API server. It must cost the others nothing: none of them is fenced
	// while it lasts (VBystanderFenced). At the fault's end its address
	// works, and it joins.
	BadAddress Kind = "bad-address"
	// OneWayCut holds what a member sends to the other members (Drop, one
	// way) for the hold, while it hears them and reaches etcd and the API
	// server: the others stop hearing it. Like BadAddress, it must fence
	// none of the others (VBystanderFenced).
	OneWayCut Kind = "one-way-cut"
)

// LeavePauseSpread bounds the delay between a LeavePause's SIGTERM and
// its SIGSTOP (a leave handed its ranges over in 40–80 ms).
const LeavePauseSpread = 150 * time.Millisecond

// LeaveCutHold is how long a LeaveCut holds its target's bytes: the
// default leave timeout (30 s), then the lease duration (5 s) for the
// deleted lease to go void, and 5 s for the others to claim its ranges.
const LeaveCutHold = 40 * time.Second

// LeaseDeleteHold is how long a lease-delete freezes its target: below
// the default renew deadline (3 s).
const LeaseDeleteHold = 2 * time.Second

// Kinds are the faults a run can inject, in the order of the short run.
var Kinds = []Kind{Pause, Partition, PartitionReject, EtcdCut, APICut, EtcdRestart, Kill, Leave, JoinDuringDeletes, Rolling, Flap, LeaseDelete, LeavePause, LeaveCut, BadAddress, OneWayCut}

// FlapAfter and FlapSpread: a Flap's member gets SIGTERM FlapAfter plus
// up to FlapSpread after its start (a member joining three others served
// its share 2.2 s after its start).
const (
	FlapAfter  = 300 * time.Millisecond
	FlapSpread = 2500 * time.Millisecond
)

// Targetless: the fault picks no member of the group (it starts its own,
// or hits every member).
func (k Kind) Targetless() bool {
	return k == EtcdRestart || k == Join || k == JoinDuringDeletes || k == Rolling || k == Flap || k == BadAddress
}

// fences: the fault may cost its target its membership; it must be
// serving again by the end.
func (k Kind) fences() bool {
	return k == Pause || k == Partition || k == PartitionReject || k == EtcdCut || k == APICut || k == EtcdRestart || k == LeaseDelete || k == BadAddress || k == OneWayCut
}

// takesOver: the others take the target's ranges without its handover
// (the report's takeover time).
func (k Kind) takesOver() bool { return k.freezes() || k == Kill || k == Crash || k == LeaveCut }

// freezes: the fault stops its target with SIGSTOP, then resumes it.
func (k Kind) freezes() bool { return k == Pause || k == LeaseDelete || k == LeavePause }

// Fault is one injected fault.
type Fault struct {
	Kind Kind
	// Target is the member process (its name in the run); "" for an etcd
	// restart. For a join, the member that joined.
	Target string
	// Start is when the fault began (the signal sent, the cut made);
	// End when it was healed (the same as Start for a kill or a leave).
	Start, End int64
}

// Interval is [Start, End) in Unix nanoseconds.
type Interval struct{ Start, End int64 }

// Proc is one member process of a run, as the checker sees it.
type Proc struct {
	Name  string
	Calls []calllog.Record
	// Torn counts records a kill cut short.
	Torn int
	// Exited is when the process exited, 0 if it ran to the end.
	Exited int64
	// Frozen are the intervals it spent stopped (SIGSTOP to SIGCONT).
	Frozen []Interval
	// Fences are the reasons of the fences its log records (FenceReasons).
	Fences []string
	// Events are the protocol's paths its log records (LogEvents).
	Events []Event
}

// Delete is one delete the workload made (with a UID precondition).
type Delete struct {
	Key, UID   string
	Start, End int64
	OK         bool
}

// Object is an object on the server at the end.
type Object struct{ UID, RV string }

// Final is a live member's state at the end.
type Final struct {
	Name  string
	State shardproc.State
	Err   string // the state could not be read
}

// Input is everything the checker needs of a run.
type Input struct {
	Ranges  int
	Procs   []Proc
	Faults  []Fault
	Deletes []Delete
	// Server are the objects on the server at the end, by key.
	Server map[string]Object
	// Final are the live members' states at the end.
	Final []Final
	// Begin is when every range was first delivered once (the run's
	// first settle); End the end of the run.
	Begin, End int64
	// ServingAgain is, per fault, when its target (every member, for an
	// etcd restart) was last seen not serving and then serving again (0:
	// never seen serving again, or not measured).
	ServingAgain []int64
}

// Violation is a broken promise.
type Violation struct {
	Kind   string
	At     int64
	Fault  int // index in Input.Faults of the last fault begun before At; -1: none
	Detail string
}

// Violation kinds.
const (
	VOverlap      = "overlap"       // two members' calls on one range overlap
	VInterleave   = "interleaved"   // a member's call on a range after another's, with no OnAcquire of the range in between
	VRVBack       = "rv-back"       // a key's resourceVersion went back
	VMissedDelete = "missed-delete" // a deleted object a handler had seen reached no OnDelete
	VDeleteOfLive = "delete-of-live"
	VTokenBack    = "token-back" // a call with an older fencing token after one with a newer had ended
	VEndState     = "end-state"  // caches, views or ranges not as the server's at the end
	VNotServing   = "not-serving"
	VNoCalls      = "no-calls" // nothing to check
	// VBystanderFenced: a member a fault did not aim at was fenced while
	// it lasted, where the fault must cost only its target (BadAddress).
	VBystanderFenced = "bystander-fenced"
	// VKindsApart: a range's kinds were not delivered together (a group
	// of several kinds): a member's call on an object of one kind overlaps
	// another member's call of another kind on the range, or follows it
	// with no OnAcquire of the range's first kind in between, or a member
	// calls a handler of an added kind on a range whose first kind it did
	// not deliver then.
	VKindsApart = "kinds-apart"
)

// Exemption kinds.
const (
	// EResumeGap: a delete on a range whose new owner could not replay
	// the range's changes from the lost deliverer's position (it had left
	// the API server's window), after the delete: the documented limit.
	EResumeGap  = "resume-gap"
	EFrozenCall = "frozen-call" // an overlap by a call its process was frozen in
)

// Gap is a time when no member delivered a range.
type Gap struct {
	Range      int
	Start, End int64
	Fault      int
	// Prev is the process whose delivery of the range ended when the gap
	// began ("" if none).
	Prev string
	// Open: the range was still not delivered at the end.
	Open bool
}

// Duration is the gap's length.
func (g Gap) Duration() time.Duration { return time.Duration(g.End - g.Start) }

// FaultReport is what one fault caused.
type FaultReport struct {
	Fault Fault
	// Takeover: for a freeze, a kill or a leave cut off, from the fault
	// until every range its target delivered was delivered again (-1 if
	// one never was, 0 for other kinds); Moved counts those ranges.
	Takeover time.Duration
	Moved    int
	// Unserved sums, per range, the gaps begun during or after this
	// fault (and before the next).
	Unserved map[int]time.Duration
	// ServingAgain: from the fault's end until its target served again
	// (-1: not seen serving again).
	ServingAgain time.Duration
	// Deletes counts the workload's deletes from the fault's start to the
	// next fault's (or the end): those the fault could cost.
	Deletes    int
	Violations map[string]int
	Exemptions map[string]int
	// Events counts the protocol's paths the members' logs record from
	// the fault's start to the next fault's (Events).
	Events map[string]int `json:",omitempty"`
}

// Result is the checker's verdict.
type Result struct {
	Calls int // object calls checked
	// CallsByKind counts them by kind (Record.Kind) when there are
	// several.
	CallsByKind map[string]int `json:",omitempty"`
	Torn        int
	Switches    int // times a range's deliverer changed, counted per kind
	Violations  []Violation
	Exemptions  []Violation
	Gaps        []Gap
	Faults      []FaultReport
	// None are the violations and exemptions before any fault.
	None FaultReport
	// Begin is Input.Begin.
	Begin int64
	// Fences counts the members' fences by reason, from their logs.
	Fences map[string]int `json:",omitempty"`
	// Events counts the protocol's paths the members' logs record (Events).
	Events map[string]int `json:",omitempty"`
}

// Count returns the number of violations of kind k ("" for all).
func (r *Result) Count(k string) int { return countKind(r.Violations, k) }

// ExemptCount returns the number of exemptions of kind k ("" for all).
func (r *Result) ExemptCount(k string) int { return countKind(r.Exemptions, k) }

func countKind(vs []Violation, k string) int {
	n := 0
	for _, v := range vs {
		if k == "" || v.Kind == k {
			n++
		}
	}
	return n
}

type call struct {
	calllog.Record
	proc int
}

// key is the call's object by the checker's key (ObjectKey).
func (c call) key() string { return ObjectKey(c.Kind, c.Key) }

// rangeKind is one kind's part of a range.
type rangeKind struct {
	kind  string
	index int
}

func (rk rangeKind) String() string {
	if rk.kind == "" {
		return fmt.Sprintf("range %d", rk.index)
	}
	return fmt.Sprintf("range %d (%s)", rk.index, rk.kind)
}

func sortedRangeKinds[V any](m map[rangeKind]V) []rangeKind {
	out := make([]rangeKind, 0, len(m))
	for rk := range m {
		out = append(out, rk)
	}
	slices.SortFunc(out, func(a, b rangeKind) int {
		if c := strings.Compare(a.kind, b.kind); c != 0 {
			return c
		}
		return a.index - b.index
	})
	return out
}

// kindSuffix names a kind other than the first after an ownership call.
func kindSuffix(kind string) string {
	if kind == "" {
		return ""
	}
	return "(" + kind + ")"
}

// Check checks a run.
func Check(in Input) *Result {
	res := &Result{Begin: in.Begin}
	var calls []call
	for i, p := range in.Procs {
		res.Torn += p.Torn
		for _, f := range p.Fences {
			if res.Fences == nil {
				res.Fences = map[string]int{}
			}
			res.Fences[f]++
		}
		for _, e := range p.Events {
			if res.Events == nil {
				res.Events = map[string]int{}
			}
			res.Events[e.Name]++
		}
		for _, r := range p.Calls {
			calls = append(calls, call{r, i})
		}
	}
	attribute := func(at int64) int { return attributeTo(in.Faults, at) }
	violate := func(kind string, at int64, format string, args ...any) {
		res.Violations = append(res.Violations, Violation{kind, at, attribute(at), fmt.Sprintf(format, args...)})
	}
	exempt := func(kind string, at int64, fault int, format string, args ...any) {
		res.Exemptions = append(res.Exemptions, Violation{kind, at, fault, fmt.Sprintf(format, args...)})
	}

	delivery := deliveryIntervals(in)
	res.Gaps = gaps(in, delivery, attribute)

	// Calls about objects, per kind's range and per key, in the order
	// they began.
	byRange := map[rangeKind][]call{}
	byKey := map[string][]call{}
	kinds := map[string]int{}
	for _, c := range calls {
		if !c.Op.Object() {
			continue
		}
		res.Calls++
		kinds[c.Kind]++
		rk := rangeKind{c.Kind, c.Range}
		byRange[rk] = append(byRange[rk], c)
		byKey[c.key()] = append(byKey[c.key()], c)
	}
	if len(kinds) > 1 {
		res.CallsByKind = kinds
	}
	if res.Calls == 0 {
		violate(VNoCalls, in.End, "no handler call about an object was logged")
	}
	name := func(c call) string { return in.Procs[c.proc].Name }

	// Exclusive, per kind: no two members' calls on a range overlap, and
	// a member calls after another only once it has acquired the range
	// since the other's last call (the old owner's last call ends before
	// the new owner's first begins).
	acquired := map[rangeKind]map[int][]int64{} // range → process → OnAcquire times
	for _, c := range calls {
		if c.Op == calllog.OpAcquire {
			rk := rangeKind{c.Kind, c.Range}
			if acquired[rk] == nil {
				acquired[rk] = map[int][]int64{}
			}
			acquired[rk][c.proc] = append(acquired[rk][c.proc], c.Start)
		}
	}
	acquiredBetween := func(rg rangeKind, proc int, from, to int64) bool {
		for _, at := range acquired[rg][proc] {
			if at >= from && at <= to {
				return true
			}
		}
		return false
	}
	// handOver judges call c on range rg, made after another member's
	// call last: exempt when last was frozen mid-call and c overlaps it or
	// came with no OnAcquire since last began; else overlap when they
	// overlap, or interleave with no OnAcquire of rg since last ended.
	handOver := func(rg rangeKind, last, c call, overlap, interleave string) {
		fz, frozen := frozenDuring(in.Procs[last.proc], last.Start, last.End)
		switch {
		case frozen && (c.Start < last.End || !acquiredBetween(rg, c.proc, last.Start, c.Start)):
			exempt(EFrozenCall, c.Start, attribute(c.Start), "%s: %s's %s %s was frozen mid-call (%s), overlapping %s's %s %s",
				rg, name(last), last.Op, last.key(), fmtInterval(fz), name(c), c.Op, c.key())
		case c.Start < last.End:
			violate(overlap, c.Start, "%s: %s's %s %s [%s] overlaps %s's %s %s [%s]", rg, name(last), last.Op, last.key(),
				fmtInterval(Interval{last.Start, last.End}), name(c), c.Op, c.key(), fmtInterval(Interval{c.Start, c.End}))
		case !acquiredBetween(rg, c.proc, last.End, c.Start):
			violate(interleave, c.Start, "%s: %s's %s %s at %s after %s's %s %s at %s, with no OnAcquire of the range in between", rg,
				name(c), c.Op, c.key(), fmtTime(c.Start), name(last), last.Op, last.key(), fmtTime(last.Start))
		}
	}
	for _, rg := range sortedRangeKinds(byRange) {
		cs := byRange[rg]
		byStart(cs)
		switches(cs, func(last, c call) {
			res.Switches++
			handOver(rg, last, c, VOverlap, VInterleave)
		})
		// Fencing tokens: once a call with token t has ended, no call
		// that begins later has a lower one.
		byEnd := slices.Clone(cs)
		sort.SliceStable(byEnd, func(i, j int) bool { return byEnd[i].End < byEnd[j].End })
		j := 0
		var top call
		for _, c := range cs {
			for j < len(byEnd) && byEnd[j].End <= c.Start {
				if byEnd[j].Token > top.Token {
					top = byEnd[j]
				}
				j++
			}
			if c.Token < top.Token {
				violate(VTokenBack, c.Start, "%s: %s's %s %s with token %d after %s's with token %d", rg, name(c), c.Op, c.key(), c.Token, name(top), top.Token)
			}
		}
	}
	if len(kinds) > 1 {
		res.checkKindsApart(in, calls, handOver, violate)
	}

	// Per key, resourceVersions never go back.
	for _, key := range sortedKeys(byKey) {
		cs := byKey[key]
		byStart(cs)
		var top call
		have := false
		for _, c := range cs {
			if !have {
				top, have = c, true
				continue
			}
			cmp, err := resourceversion.CompareResourceVersion(c.RV, top.RV)
			if err != nil {
				violate(VRVBack, c.Start, "%s: %s's %s has resourceVersion %q, %s's had %q: %v", key, name(c), c.Op, c.RV, name(top), top.RV, err)
				continue
			}
			if cmp < 0 {
				across := "across members"
				if c.proc == top.proc {
					across = "in one member"
				}
				violate(VRVBack, c.Start, "%s: %s's %s at %s after %s's %s at %s (%s, range %d)", key, name(c), c.Op, c.RV, name(top), top.Op, top.RV, across, c.Range)
				continue
			}
			top = c
		}
	}

	// Deletes: every deleted object a handler saw reaches some OnDelete,
	// and no OnDelete is about an object that still exists.
	type seenUID struct {
		key   string
		rng   int
		first int64
	}
	seen := map[string]seenUID{}
	deleted := map[string]bool{}
	for _, c := range calls {
		if !c.Op.Object() || c.UID == "" {
			continue
		}
		if c.Op.Deletion() {
			deleted[c.UID] = true
			continue
		}
		if s, ok := seen[c.UID]; !ok || c.Start < s.first {
			seen[c.UID] = seenUID{c.key(), c.Range, c.Start}
		}
	}
	live := map[string]string{}
	for key, o := range in.Server {
		live[o.UID] = key
	}
	for _, c := range calls {
		if c.Op.Deletion() && c.UID != "" {
			if _, ok := live[c.UID]; ok {
				violate(VDeleteOfLive, c.Start, "%s's %s of %s (uid %s), which still exists", name(c), c.Op, c.key(), c.UID)
			}
		}
	}
	deletes := map[string]Delete{}
	for _, d := range in.Deletes {
		if old, ok := deletes[d.UID]; !ok || (d.OK && !old.OK) {
			deletes[d.UID] = d
		}
	}
	for _, uid := range sortedKeys(seen) {
		s := seen[uid]
		if _, ok := live[uid]; ok || deleted[uid] {
			continue
		}
		d, known := deletes[uid]
		if !known {
			violate(VMissedDelete, in.End, "%s (uid %s) is gone and reached no OnDelete; the workload has no delete of it", s.key, uid)
			continue
		}
		if p, at, ok := resumeGapAfter(in, s.rng, d.Start); ok {
			exempt(EResumeGap, d.Start, attribute(at), "%s (uid %s), deleted at %s, in range %d, whose takeover by %s at %s could not replay from the last position",
				s.key, uid, fmtTime(d.Start), s.rng, p, fmtTime(at))
			continue
		}
		var hist []string
		for _, c := range calls {
			if c.UID == uid || (c.Key == "" && c.Range == s.rng && (c.Op == calllog.OpAcquire || c.Op == calllog.OpRelease)) {
				what := c.key()
				if c.Key == "" {
					what = kindSuffix(c.Kind)
				}
				hist = append(hist, fmt.Sprintf("%s %s %s %s rv %s", fmtTime(c.Start), in.Procs[c.proc].Name, c.Op, what, c.RV))
			}
		}
		if len(hist) > 12 {
			hist = hist[len(hist)-12:]
		}
		violate(VMissedDelete, d.Start, "%s (uid %s, range %d), deleted at %s, reached no OnDelete; the last calls on it and its range: %s",
			s.key, uid, s.rng, fmtTime(d.Start), strings.Join(hist, "; "))
	}

	// A fault that must cost only its target fenced none of the others.
	for _, f := range in.Faults {
		if f.Kind != BadAddress && f.Kind != OneWayCut {
			continue
		}
		for _, p := range in.Procs {
			if p.Name == f.Target {
				continue
			}
			for _, e := range p.Events {
				if e.Name == EventFence && e.At >= f.Start && e.At <= f.End {
					violate(VBystanderFenced, e.At, "%s was fenced at %s, during the %s of %s", p.Name, fmtTime(e.At), f.Kind, f.Target)
				}
			}
		}
	}

	// The end: caches equal the server's, every range delivered once, and
	// every member that a fault may have fenced serves again.
	if why := EndState(in.Ranges, in.Server, in.Final); why != "" {
		violate(VEndState, in.End, "%s", why)
	}
	finals := map[string]Final{}
	for _, f := range in.Final {
		finals[f.Name] = f
	}
	// Each live process that the last fault aimed at it may have fenced.
	lastFault := map[string]int{}
	for i, f := range in.Faults {
		if !f.Kind.fences() {
			continue
		}
		for _, target := range targets(in, f) {
			lastFault[target] = i
		}
	}
	for _, target := range sortedKeys(lastFault) {
		i := lastFault[target]
		if why := notServing(in, finals, target); why != "" {
			res.Violations = append(res.Violations, Violation{VNotServing, in.End, i, fmt.Sprintf("%s, %s's target: %s", target, in.Faults[i].Kind, why)})
		}
	}

	res.report(in, delivery)
	return res
}

// targets are the live processes at the end that fault f may have fenced.
func targets(in Input, f Fault) []string {
	var out []string
	for _, p := range in.Procs {
		if p.Exited != 0 {
			continue
		}
		if f.Target == p.Name || (f.Target == "" && f.Kind == EtcdRestart) {
			out = append(out, p.Name)
		}
	}
	return out
}

// notServing says why the live process name does not serve: "" if it is
// in every live member's view and delivers a range (when there are as
// many ranges as members).
func notServing(in Input, finals map[string]Final, name string) string {
	f, ok := finals[name]
	if !ok {
		return "no state at the end"
	}
	if f.Err != "" {
		return "its state could not be read: " + f.Err
	}
	st := f.State
	if st.Failed != "" {
		return "failed: " + st.Failed
	}
	if st.Member == "" {
		return "no member id"
	}
	for _, o := range in.Final {
		if o.Err == "" && !slices.Contains(o.State.View, st.Member) {
			return fmt.Sprintf("not in %s's view %v", o.Name, o.State.View)
		}
	}
	if len(st.Ranges) == 0 && in.Ranges >= len(in.Final) {
		return "delivers no range"
	}
	return ""
}

// EndState is "" once every live member has synced, they agree on the
// view, each range is delivered by one member, each member's handler view
// equals its cache, and the caches together equal the server's objects,
// each key once; otherwise it says what is not so.
func EndState(ranges int, server map[string]Object, finals []Final) string {
	union := map[string]string{}
	owner := map[int]string{}
	var view []string
	for i, f := range finals {
		if f.Err != "" {
			return f.Name + ": " + f.Err
		}
		st := f.State
		if st.Failed != "" {
			return f.Name + " failed: " + st.Failed
		}
		if !st.Synced {
			return f.Name + " not synced"
		}
		if i == 0 {
			view = st.View
		} else if !slices.Equal(view, st.View) {
			return fmt.Sprintf("views differ: %s's %v, %s's %v", finals[0].Name, view, f.Name, st.View)
		}
		for _, rg := range st.Ranges {
			if o, dup := owner[rg]; dup {
				return fmt.Sprintf("range %d delivered by %s and %s", rg, o, f.Name)
			}
			owner[rg] = f.Name
		}
		for k, rv := range st.Cache {
			if _, dup := union[k]; dup {
				return k + " cached twice"
			}
			union[k] = rv
		}
		if d := mapDiff(st.Cache, st.Handler); d != "" {
			return f.Name + "'s handler view differs from its cache: " + d
		}
		if len(st.HandlerErrors) > 0 {
			return fmt.Sprintf("%s's handler: %v", f.Name, st.HandlerErrors)
		}
	}
	if len(owner) != ranges {
		return fmt.Sprintf("%d of %d ranges delivered", len(owner), ranges)
	}
	want := make(map[string]string, len(server))
	for k, o := range server {
		want[k] = o.RV
	}
	if d := mapDiff(want, union); d != "" {
		return "the caches differ from the server: " + d
	}
	return ""
}

func mapDiff(want, got map[string]string) string {
	var out []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			out = append(out, "missing "+k)
		} else if g != v {
			out = append(out, fmt.Sprintf("%s at %s, want %s", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "extra "+k)
		}
	}
	sort.Strings(out)
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	return strings.Join(out, "; ")
}

// deliveryIntervals returns, per range and process, when the process
// delivered the range: from OnAcquire (or its first call on the range) to
// OnRelease, its exit or the end, without the times it was frozen; by the
// calls of the group's first kind.
func deliveryIntervals(in Input) map[int]map[int][]Interval { return spans(in, true) }

// spans returns, per range and process, when the process delivered the
// range's first kind, as deliveryIntervals says; the times it was frozen
// left out if unfrozen.
func spans(in Input, unfrozen bool) map[int]map[int][]Interval {
	out := map[int]map[int][]Interval{}
	for pi, p := range in.Procs {
		end := in.End
		if p.Exited != 0 && p.Exited < end {
			end = p.Exited
		}
		cs := slices.Clone(p.Calls)
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].Start < cs[j].Start })
		open := map[int]int64{}
		add := func(rg int, s, e int64) {
			if out[rg] == nil {
				out[rg] = map[int][]Interval{}
			}
			if !unfrozen {
				out[rg][pi] = append(out[rg][pi], Interval{s, e})
				return
			}
			for _, iv := range subtract(Interval{s, e}, p.Frozen) {
				out[rg][pi] = append(out[rg][pi], iv)
			}
		}
		for _, c := range cs {
			if c.Kind != "" {
				continue
			}
			s, isOpen := open[c.Range]
			switch {
			case c.Op == calllog.OpRelease:
				if isOpen {
					add(c.Range, s, c.End)
					delete(open, c.Range)
				}
			case !isOpen:
				open[c.Range] = c.Start
			}
		}
		for rg, s := range open {
			add(rg, s, end)
		}
	}
	return out
}

// subtract returns iv without the frozen intervals.
func subtract(iv Interval, frozen []Interval) []Interval {
	out := []Interval{iv}
	for _, f := range frozen {
		var next []Interval
		for _, o := range out {
			if f.End <= o.Start || f.Start >= o.End {
				next = append(next, o)
				continue
			}
			if f.Start > o.Start {
				next = append(next, Interval{o.Start, f.Start})
			}
			if f.End < o.End {
				next = append(next, Interval{f.End, o.End})
			}
		}
		out = next
	}
	return out
}

// gaps returns the times after in.Begin when no process delivered a range.
func gaps(in Input, delivery map[int]map[int][]Interval, attribute func(int64) int) []Gap {
	var out []Gap
	type owned struct {
		Interval
		proc int
	}
	for rg := 0; rg < in.Ranges; rg++ {
		var ivs []owned
		for p, l := range delivery[rg] {
			for _, iv := range l {
				ivs = append(ivs, owned{iv, p})
			}
		}
		sort.Slice(ivs, func(i, j int) bool { return ivs[i].Start < ivs[j].Start })
		at, prev := in.Begin, ""
		for _, iv := range ivs {
			if iv.Start > at {
				out = append(out, Gap{Range: rg, Start: at, End: iv.Start, Fault: attribute(at), Prev: prev})
			}
			if iv.End > at {
				at, prev = iv.End, in.Procs[iv.proc].Name
			}
		}
		if at < in.End {
			out = append(out, Gap{Range: rg, Start: at, End: in.End, Fault: attribute(at), Prev: prev, Open: true})
		}
	}
	return out
}

// resumeGapAfter finds a member's log line saying that its takeover of
// range rg could not replay the range's changes from the lost
// deliverer's position, at or after at.
func resumeGapAfter(in Input, rg int, at int64) (string, int64, bool) {
	for _, p := range in.Procs {
		for _, e := range p.Events {
			if e.Name == EventResumeCutShort && e.Range == rg && e.At >= at {
				return p.Name, e.At, true
			}
		}
	}
	return "", 0, false
}

func frozenDuring(p Proc, start, end int64) (Interval, bool) {
	for _, f := range p.Frozen {
		if f.Start > start && f.Start < end {
			return f, true
		}
	}
	return Interval{}, false
}

// report fills the per-fault figures.
func (res *Result) report(in Input, delivery map[int]map[int][]Interval) {
	res.None = FaultReport{Violations: map[string]int{}, Exemptions: map[string]int{}, Unserved: map[int]time.Duration{}}
	res.Faults = make([]FaultReport, len(in.Faults))
	procIndex := map[string]int{}
	for i, p := range in.Procs {
		procIndex[p.Name] = i
	}
	for i, f := range in.Faults {
		fr := FaultReport{Fault: f, Violations: map[string]int{}, Exemptions: map[string]int{}, Unserved: map[int]time.Duration{}, ServingAgain: -1}
		if i < len(in.ServingAgain) && in.ServingAgain[i] != 0 {
			fr.ServingAgain = time.Duration(in.ServingAgain[i] - f.End)
		}
		if pi, ok := procIndex[f.Target]; ok && f.Kind.takesOver() {
			fr.Takeover, fr.Moved = takeover(delivery, pi, f.Start, in.End)
		}
		next := in.End
		if i+1 < len(in.Faults) {
			next = in.Faults[i+1].Start
		}
		for _, d := range in.Deletes {
			if d.OK && d.Start >= f.Start && d.Start < next {
				fr.Deletes++
			}
		}
		res.Faults[i] = fr
	}
	at := func(i int) *FaultReport {
		if i < 0 {
			return &res.None
		}
		return &res.Faults[i]
	}
	for _, v := range res.Violations {
		at(v.Fault).Violations[v.Kind]++
	}
	for _, e := range res.Exemptions {
		at(e.Fault).Exemptions[e.Kind]++
	}
	for _, g := range res.Gaps {
		at(g.Fault).Unserved[g.Range] += g.Duration()
	}
	for _, p := range in.Procs {
		for _, e := range p.Events {
			fr := at(attributeTo(in.Faults, e.At))
			if fr.Events == nil {
				fr.Events = map[string]int{}
			}
			fr.Events[e.Name]++
		}
	}
}

// attributeTo returns the last fault begun at or before at, -1 if none.
func attributeTo(faults []Fault, at int64) int {
	f := -1
	for i, ft := range faults {
		if ft.Start <= at {
			f = i
		}
	}
	return f
}

// takeover returns how long after at every range that process pi
// delivered just before at was delivered again (by any process), and how
// many ranges that was; -1 if one never was.
func takeover(delivery map[int]map[int][]Interval, pi int, at, end int64) (time.Duration, int) {
	var worst time.Duration
	moved := 0
	for _, byProc := range delivery {
		had := false
		for _, iv := range byProc[pi] {
			if iv.Start < at && iv.End >= at {
				had = true
			}
		}
		if !had {
			continue
		}
		moved++
		// The first time after at the range is delivered again: by
		// another process, or by pi once it delivers it anew (after a
		// pause).
		again := int64(-1)
		for p, ivs := range byProc {
			for _, iv := range ivs {
				if iv.End <= at || (p == pi && iv.Start < at) {
					continue
				}
				if s := max(iv.Start, at); again < 0 || s < again {
					again = s
				}
			}
		}
		if again < 0 || again > end {
			return -1, moved
		}
		worst = max(worst, time.Duration(again-at))
	}
	return worst, moved
}

func sortedKeys[K interface{ ~int | ~string }, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func fmtTime(ns int64) string { return time.Unix(0, ns).Format("15:04:05.000") }

func fmtInterval(iv Interval) string {
	return fmtTime(iv.Start) + "+" + time.Duration(iv.End-iv.Start).Round(time.Microsecond).String()
}

// byStart orders calls by their start, then their end.
func byStart(cs []call) {
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].Start != cs[j].Start {
			return cs[i].Start < cs[j].Start
		}
		return cs[i].End < cs[j].End
	})
}

// switches calls f for each call c of cs (ordered by byStart) made by
// another member than last, the call before it that ended latest, or its
// own member's latest.
func switches(cs []call, f func(last, c call)) {
	var last call
	for i, c := range cs {
		if i > 0 && last.proc != c.proc {
			f(last, c)
		}
		if i == 0 || c.End > last.End || c.proc != last.proc {
			last = c
		}
	}
}

// checkKindsApart checks that a range's kinds are delivered together
// (VKindsApart): on a range, no member's call of one kind overlaps
// another member's call of another kind, nor follows it without an
// OnAcquire of the range's first kind in between; and each call of an
// added kind is made by a member while it delivers the range's first kind
// (from its OnAcquire to its OnRelease, its exit or the end). Calls of one
// kind are checked apart (VOverlap, VInterleave).
func (res *Result) checkKindsApart(in Input, calls []call, handOver func(rg rangeKind, last, c call, overlap, interleave string),
	violate func(kind string, at int64, format string, args ...any)) {
	name := func(c call) string { return in.Procs[c.proc].Name }
	byRange := map[int][]call{}
	for _, c := range calls {
		if c.Op.Object() {
			byRange[c.Range] = append(byRange[c.Range], c)
		}
	}
	for _, rg := range sortedKeys(byRange) {
		cs := byRange[rg]
		byStart(cs)
		switches(cs, func(last, c call) {
			if last.Kind != c.Kind {
				handOver(rangeKind{"", rg}, last, c, VKindsApart, VKindsApart)
			}
		})
	}
	first := spans(in, false)
	for _, c := range calls {
		if !c.Op.Object() || c.Kind == "" {
			continue
		}
		inside := false
		for _, iv := range first[c.Range][c.proc] {
			if iv.Start <= c.Start && c.End <= iv.End {
				inside = true
				break
			}
		}
		if !inside {
			violate(VKindsApart, c.Start, "range %d: %s's %s %s [%s], while it did not deliver the range's first kind",
				c.Range, name(c), c.Op, c.key(), fmtInterval(Interval{c.Start, c.End}))
		}
	}
}
