package nemesis

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// violationKinds and exemptionKinds are the report's columns.
var (
	violationKinds = []string{VOverlap, VInterleave, VKindsApart, VRVBack, VMissedDelete, VDeleteOfLive, VTokenBack, VNotServing, VBystanderFenced, VEndState, VNoCalls}
	exemptionKinds = []string{EResumeGap, EFrozenCall}
)

// Table is the report: one line per fault, with its takeover time, its
// ranges' unserved time, and the checker's counts, then the totals and the
// first violations of each kind.
func (res *Result) Table() string {
	begin := res.Begin
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.AlignRight)
	head := []string{"#", "fault", "target", "at", "held", "takeover", "moved", "unserved max", "sum", "ranges", "serving again", "deletes"}
	head = append(head, violationKinds...)
	for _, e := range exemptionKinds {
		head = append(head, "exempt "+e)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	row := func(idx, kind, target, at, held, takeover, moved string, fr FaultReport, serving, deletes string) {
		mx, sum, n := unserved(fr.Unserved)
		cells := []string{idx, kind, target, at, held, takeover, moved, dur(mx), dur(sum), fmt.Sprint(n), serving, deletes}
		for _, k := range violationKinds {
			cells = append(cells, fmt.Sprint(fr.Violations[k]))
		}
		for _, k := range exemptionKinds {
			cells = append(cells, fmt.Sprint(fr.Exemptions[k]))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	row("-", "(none)", "", "", "", "", "", res.None, "", "")
	for i, fr := range res.Faults {
		f := fr.Fault
		takeover, moved := "", ""
		if f.Kind.takesOver() {
			takeover, moved = dur(fr.Takeover), fmt.Sprint(fr.Moved)
			if fr.Takeover < 0 {
				takeover = "never"
			}
		}
		serving := ""
		if f.Kind.fences() {
			serving = dur(fr.ServingAgain)
			if fr.ServingAgain < 0 {
				serving = "never"
			}
		}
		row(fmt.Sprint(i+1), string(f.Kind), f.Target, dur(time.Duration(f.Start-begin)), dur(time.Duration(f.End-f.Start)), takeover, moved, fr, serving, fmt.Sprint(fr.Deletes))
	}
	_ = tw.Flush()
	byKind := ""
	if len(res.CallsByKind) > 0 {
		var parts []string
		for _, k := range sortedKeys(res.CallsByKind) {
			name := k
			if k == "" {
				name = "first kind"
			}
			parts = append(parts, fmt.Sprintf("%d %s", res.CallsByKind[k], name))
		}
		byKind = " (" + strings.Join(parts, ", ") + ")"
	}
	fmt.Fprintf(&b, "%d handler calls%s, %d deliverer switches, %d records torn by kills; %d violations, %d exemptions\n",
		res.Calls, byKind, res.Switches, res.Torn, len(res.Violations), len(res.Exemptions))
	if len(res.Fences) > 0 {
		fmt.Fprintf(&b, "fences, from the members' logs: %s\n", fenceSummary(res.Fences))
	}
	if len(res.Events) > 0 {
		fmt.Fprintf(&b, "the members' logs record: %s\n", eventSummary(res.Events))
		fmt.Fprintf(&b, "from each fault's start to the next's, by kind: %s\n", res.eventsByKind())
	}
	b.WriteString(res.Examples(3))
	return b.String()
}

// Examples lists the first n violations and exemptions of each kind.
func (res *Result) Examples(n int) string {
	var b strings.Builder
	list := func(what string, vs []Violation) {
		byKind := map[string][]Violation{}
		for _, v := range vs {
			byKind[v.Kind] = append(byKind[v.Kind], v)
		}
		kinds := make([]string, 0, len(byKind))
		for k := range byKind {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			fmt.Fprintf(&b, "%s %s (%d):\n", what, k, len(byKind[k]))
			for _, v := range byKind[k][:min(n, len(byKind[k]))] {
				fmt.Fprintf(&b, "  %s %s\n", fmtTime(v.At), v.Detail)
			}
		}
	}
	list("violation", res.Violations)
	list("exempt", res.Exemptions)
	return b.String()
}

func unserved(m map[int]time.Duration) (mx, sum time.Duration, n int) {
	for _, d := range m {
		sum += d
		mx = max(mx, d)
		n++
	}
	return mx, sum, n
}

func dur(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	if d < time.Millisecond && d > -time.Millisecond {
		return d.Round(time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}
