package sim

import (
	"strings"
	"unicode"
)

// Shrink returns a shorter script failing like lines does (same kind of
// first violation), by removing lines one at a time while it still fails.
func Shrink(lines []string) []string {
	kind := failureKind(New().Run(lines))
	if kind == "" {
		return lines
	}
	cur := lines
	for changed := true; changed; {
		changed = false
		for i := len(cur) - 1; i >= 0; i-- {
			try := append(append([]string(nil), cur[:i]...), cur[i+1:]...)
			if failureKind(New().Run(try)) == kind {
				cur, changed = try, true
			}
		}
	}
	return cur
}

// failureKind is the first violation with numbers and quoted parts taken
// out.
func failureKind(err string) string {
	if err == "" {
		return ""
	}
	first, _, _ := strings.Cut(err, "\n")
	first, _, _ = strings.Cut(first, "[")
	first, _, _ = strings.Cut(first, "\"")
	return strings.Map(func(r rune) rune {
		if unicode.IsDigit(r) {
			return -1
		}
		return r
	}, first)
}
