package nemesis

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// fenceLine is the message a member logs when it is fenced
// (shard/rangeinf.go), with the fence's reason as "reason".
const fenceLine = `"fenced: no handler is called from now on"`

// FenceReasons returns the reasons of the fences a member's log records,
// in order, each as fenceKind gives it: a line with the message and no
// reason that can be read counts as "(unreadable)".
func FenceReasons(log string) []string {
	var out []string
	for line := range strings.Lines(log) {
		_, rest, ok := strings.Cut(line, fenceLine)
		if !ok {
			continue
		}
		reason := "(unreadable)"
		if _, v, ok := strings.Cut(rest, " reason="); ok {
			if q, err := strconv.QuotedPrefix(v); err == nil {
				if s, err := strconv.Unquote(q); err == nil {
					reason = s
				}
			}
		}
		out = append(out, fenceKind(reason))
	}
	return out
}

// fenceKind is a fence's reason without what differs from one fence of
// its kind to the next: the details in parentheses, a member's name,
// numbers (N).
func fenceKind(reason string) string {
	if i := strings.Index(reason, " ("); i > 0 {
		reason = reason[:i]
	}
	if r, ok := strings.CutPrefix(reason, "member "); ok {
		if _, rest, ok := strings.Cut(r, " "); ok {
			reason = "a member " + rest
		}
	}
	var b strings.Builder
	digits := false
	for _, c := range reason {
		if c >= '0' && c <= '9' {
			if !digits {
				b.WriteByte('N')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(c)
	}
	return b.String()
}

// Events are the protocol's paths a member's log records, each by its
// message (as shard logs it) and the name the report counts it under: the
// count says whether a run took the path at all.
var Events = []struct{ Message, Name string }{
	{"acquired range", "acquisitions"},
	{"released range", "releases"},
	{"revoked the lease of a member that stopped renewing it", "revokes"},
	{"range informer started from the previous deliverer's copy, without a list", "warm starts"},
	{"range informer starts cold: no member delivers the range as this member knows", "cold starts"},
	{"a range's informer lists instead of starting from the previous deliverer's copy (logged once per reason)", "warm-start fallbacks (one line per reason)"},
	{"the range's handlers were not given everything before its release; the next owner may miss deletes", "drains cut short"},
	{"the range's informer has not reached the previous deliverer's version; still waiting, its handlers get nothing of the range until then", "catch-ups past their timeout (one line per timeout)"},
	{"the leave's time ran out; the ranges still delivered were released with no member asking, and resume from their records", "leaves out of time"},
	{"cannot release the lease; the others revoke it once it lapses", "lease releases failed"},
	{"cannot write the range's record at its release; no member takes the range from this one until it is written (tried again each tick)", "range records not written"},
	{"cannot write the claimed ranges' records", "claims not written"},
	{"the range resumes from its last delivered position", "resumes"},
	{"fenced: no handler is called from now on", EventFence},
	{"the range's changes since its last delivered position could not all be replayed: a delete in between may reach no handler", EventResumeCutShort},
}

// EventFence names a fence (fenceLine).
const EventFence = "fences"

// EventResumeCutShort names a range's takeover that could not replay the
// range's changes from the lost deliverer's position.
const EventResumeCutShort = "resumes cut short"

// Event is one of Events in a member's log: its name, when it was logged
// (Unix nanoseconds; 0 if the line's time could not be read) and the
// range it names (-1: none).
type Event struct {
	Name  string
	At    int64
	Range int
}

// LogEvents returns the Events a member's log records, in order. klog's
// timestamps (I1201 11:01:04.296000) have no year: year is the run's, and
// the time is read in the local zone, as klog writes it.
func LogEvents(log string, year int) []Event {
	var out []Event
	for line := range strings.Lines(log) {
		for _, e := range Events {
			if strings.Contains(line, `] "`+e.Message+`"`) {
				out = append(out, Event{Name: e.Name, At: klogTime(line, year), Range: rangeOfLine(line)})
				break
			}
		}
	}
	return out
}

// rangeOfLine reads the index of the range="3/16" a line names, -1 if
// none.
func rangeOfLine(line string) int {
	_, v, ok := strings.Cut(line, ` range="`)
	if !ok {
		return -1
	}
	idx, _, ok := strings.Cut(v, "/")
	n, err := strconv.Atoi(idx)
	if !ok || err != nil {
		return -1
	}
	return n
}

// klogTime reads a klog line's time, 0 if it cannot.
func klogTime(line string, year int) int64 {
	if len(line) < len("I0102 15:04:05.000000") {
		return 0
	}
	t, err := time.ParseInLocation("0102 15:04:05.000000", line[1:len("I0102 15:04:05.000000")], time.Local)
	if err != nil {
		return 0
	}
	return t.AddDate(year-t.Year(), 0, 0).UnixNano()
}

// eventSummary lists the counted events in Events' order, those that
// happened.
func eventSummary(events map[string]int) string {
	var parts []string
	for _, e := range Events {
		if n := events[e.Name]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, e.Name))
		}
	}
	return strings.Join(parts, ", ")
}

// eventsByKind sums the faults' events by the fault's kind, for the kinds
// in order of their first fault; "before any fault" first.
func (res *Result) eventsByKind() string {
	var parts []string
	if len(res.None.Events) > 0 {
		parts = append(parts, "before any fault: "+eventSummary(res.None.Events))
	}
	var kinds []Kind
	sums := map[Kind]map[string]int{}
	for _, fr := range res.Faults {
		if len(fr.Events) == 0 {
			continue
		}
		k := fr.Fault.Kind
		if sums[k] == nil {
			sums[k] = map[string]int{}
			kinds = append(kinds, k)
		}
		for name, n := range fr.Events {
			sums[k][name] += n
		}
	}
	for _, k := range kinds {
		parts = append(parts, string(k)+": "+eventSummary(sums[k]))
	}
	return strings.Join(parts, "; ")
}

// fenceSummary lists the fences by reason, the most frequent first.
func fenceSummary(fences map[string]int) string {
	reasons := make([]string, 0, len(fences))
	for r := range fences {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		a, b := reasons[i], reasons[j]
		if fences[a] != fences[b] {
			return fences[a] > fences[b]
		}
		return a < b
	})
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%d × %s", fences[r], r)
	}
	return strings.Join(parts, "; ")
}
