package sim

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestScripts runs testdata/*.txt: a script, a line "----", then the
// handler calls it must make (and its violations, as "error: ..." lines).
// -sim.update rewrites the part after "----".
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			text, want, _ := strings.Cut(string(b), "\n----\n")
			s := New()
			s.Run(ParseScript(text))
			got := strings.Join(normalize(s.Calls), "\n") + "\n"
			if e := s.Err(); e != "" {
				for _, l := range strings.Split(e, "\n") {
					got += "error: " + l + "\n"
				}
			}
			if *flagUpdate {
				if err := os.WriteFile(f, []byte(text+"\n----\n"+got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != want {
				t.Errorf("%s: got\n%s\nwant\n%s", f, got, want)
			}
		})
	}
}

// normalize sorts each run of consecutive calls whose order comes from a
// map in the cores: one handler's initial adds, tombstones, or same
// resource version updates.
func normalize(calls []string) []string {
	out := slices.Clone(calls)
	class := func(c string) string {
		f := strings.Fields(c)
		switch {
		case strings.HasSuffix(c, " initial"):
			return f[0] + " initial"
		case strings.HasSuffix(c, " tombstone"):
			return f[0] + " tombstone"
		case f[1] == "update":
			if rv := strings.Split(f[3], "->"); rv[0] == rv[1] {
				return f[0] + " sync"
			}
		}
		return ""
	}
	for i := 0; i < len(out); {
		j := i + 1
		if k := class(out[i]); k != "" {
			for j < len(out) && class(out[j]) == k {
				j++
			}
			slices.Sort(out[i:j])
		}
		i = j
	}
	return out
}
