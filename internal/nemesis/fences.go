package nemesis

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
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
