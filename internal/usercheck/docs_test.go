package usercheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocCodeBlocks: every code block of README.md and docs/*.md is the
// exact text of a snippet region in a test or example that go test runs
// (see docs.go), or is marked as not checked, with a reason.
func TestDocCodeBlocks(t *testing.T) {
	root := RepoRoot(t)
	docs, err := Documents(root)
	if err != nil {
		t.Fatal(err)
	}
	regions, problems, err := Regions(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	known := map[string]bool{}
	used := make([]bool, len(regions))
	goBlocks, skipped := 0, 0
	for _, doc := range docs {
		known[doc] = true
		text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
		if err != nil {
			t.Fatal(err)
		}
		blocks, problems := ParseBlocks(doc, string(text))
		for _, p := range problems {
			t.Error(p)
		}
		for _, b := range blocks {
			if b.Skip != "" {
				skipped++
				t.Logf("%s:%d: %s block not checked: %s", b.Doc, b.Line, b.Info, b.Skip)
				continue
			}
			if b.Info != "go" {
				t.Errorf("%s:%d: a %q block: only Go blocks are checked; mark it %s<reason> --> on the line above", b.Doc, b.Line, b.Info, SkipMarker)
				continue
			}
			goBlocks++
			want := Normalize(b.Text)
			var candidates []Region
			found := false
			for i, r := range regions {
				if r.Doc != doc {
					continue
				}
				candidates = append(candidates, r)
				if r.Text == want {
					found = true
					used[i] = true
					if !r.Runs {
						t.Errorf("%s:%d: its snippet region (%s:%d) is in %s, which go test does not run: use a Test, an Example with an output comment, or a function one of them calls",
							b.Doc, b.Line, r.File, r.Line, r.Func)
					}
				}
			}
			if !found {
				t.Errorf("%s:%d: this go block is not the text of any %s%s region of a test: copy it into a test or example that runs it, between %q and %q, or mark it %s<reason> -->%s",
					b.Doc, b.Line, RegionBegin, doc, RegionBegin+doc, RegionEnd, SkipMarker, closest(want, candidates))
			}
		}
	}
	for i, r := range regions {
		switch {
		case !known[r.Doc]:
			t.Errorf("%s:%d: snippet region for %q, which is not a checked document (%v)", r.File, r.Line, r.Doc, docs)
		case !used[i]:
			t.Errorf("%s:%d: snippet region for %s matches none of its go blocks: update the document or the region", r.File, r.Line, r.Doc)
		}
	}
	if goBlocks == 0 || len(regions) == 0 {
		t.Fatalf("%d go blocks, %d regions: the check found nothing to check", goBlocks, len(regions))
	}
	t.Logf("%d go blocks checked against %d snippet regions; %d blocks marked as not checked", goBlocks, len(regions), skipped)
}

// closest describes the first difference between want and the region of
// the same document that agrees with it longest.
func closest(want string, regions []Region) string {
	if len(regions) == 0 {
		return ""
	}
	wl := strings.Split(want, "\n")
	best, bestN := Region{}, -1
	for _, r := range regions {
		rl := strings.Split(r.Text, "\n")
		n := 0
		for n < len(wl) && n < len(rl) && wl[n] == rl[n] {
			n++
		}
		if n > bestN {
			best, bestN = r, n
		}
	}
	rl := strings.Split(best.Text, "\n")
	line := func(ls []string, n int) string {
		if n < len(ls) {
			return ls[n]
		}
		return "(end)"
	}
	return fmt.Sprintf("\n\tclosest: %s:%d, which differs at its line %d:\n\t  doc:    %q\n\t  region: %q",
		best.File, best.Line, bestN+1, line(wl, bestN), line(rl, bestN))
}

// TestParseBlocks pins the Markdown the doc check understands.
func TestParseBlocks(t *testing.T) {
	doc := strings.Join([]string{
		"# Title",
		"",
		"```go",
		"x := 1",
		"```",
		"",
		SkipMarker + "shell commands, run elsewhere -->",
		"```sh",
		"go test ./...",
		"```",
		"",
		"- a list item",
		"",
		"    a list item's second paragraph",
		"",
		"Text.",
		"",
		"    go test ./indented/",
		"",
		"1. item",
		"   ```go",
		"   y := 2",
		"   ```",
		SkipMarker + "-->",
		"```",
		"z",
		"```",
	}, "\n")
	blocks, problems := ParseBlocks("d.md", doc)
	var got []string
	for _, b := range blocks {
		got = append(got, fmt.Sprintf("%d %s %q skip=%q", b.Line, b.Info, b.Text, b.Skip))
	}
	want := []string{
		`3 go "x := 1" skip=""`,
		`8 sh "go test ./..." skip="shell commands, run elsewhere"`,
		`21 go "y := 2" skip=""`,
		`25  "z" skip="?"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("blocks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantProblems := []string{
		"d.md:18: indented code block",
		"d.md:24: a skip marker needs a reason",
	}
	if len(problems) != len(wantProblems) {
		t.Fatalf("problems %q, want %d", problems, len(wantProblems))
	}
	for i, p := range problems {
		if !strings.HasPrefix(p, wantProblems[i]) {
			t.Errorf("problem %q, want %q...", p, wantProblems[i])
		}
	}
}
