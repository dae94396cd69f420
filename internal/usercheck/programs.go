package usercheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Complete programs in the documents: a Go block that is a whole program
// (package main, its imports) carries a skip marker whose reason starts
// with ProgramMarker, and the document's go.mod lines one whose reason
// starts with ModuleMarker. BuildDocPrograms builds every such program
// from a module outside the repository with those go.mod lines, as a user
// would; the test named in the marker runs them.
const (
	ProgramMarker = "a complete program, built and run by "
	ModuleMarker  = "go.mod lines, built with the programs below by "
)

// DocPrograms returns the go.mod lines of doc (relative to root) and its
// complete programs, in document order.
func DocPrograms(t testing.TB, root, doc string) (mod string, programs []Block) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(doc)))
	if err != nil {
		t.Fatal(err)
	}
	blocks, problems := ParseBlocks(doc, string(text))
	if len(problems) > 0 {
		t.Fatalf("%s: %v", doc, problems)
	}
	var mods []string
	for _, b := range blocks {
		switch {
		case strings.HasPrefix(b.Skip, ProgramMarker):
			programs = append(programs, b)
		case strings.HasPrefix(b.Skip, ModuleMarker):
			mods = append(mods, b.Text)
		}
	}
	if len(programs) > 0 && len(mods) != 1 {
		t.Fatalf("%s has %d complete programs and %d blocks of go.mod lines, want one", doc, len(programs), len(mods))
	}
	if len(mods) == 1 {
		mod = mods[0]
	}
	return mod, programs
}

// BuildDocPrograms builds the complete programs of doc in a module in a
// temporary folder, outside the repository, whose go.mod is the document's
// go.mod lines (which must replace the core module with ../actorinformer):
// beside it, a link named actorinformer points at this checkout. It runs
// go mod tidy, then builds each program, and returns the binaries' paths
// in document order.
func BuildDocPrograms(t testing.TB, doc string) []string {
	t.Helper()
	root := RepoRoot(t)
	mod, programs := DocPrograms(t, root, doc)
	if len(programs) == 0 {
		t.Fatalf("%s has no complete program", doc)
	}
	if !strings.Contains(mod, "=> ../actorinformer") {
		t.Fatalf("%s's go.mod lines do not replace the module with ../actorinformer:\n%s", doc, mod)
	}
	tmp := t.TempDir()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, filepath.Join(tmp, "actorinformer")); err != nil {
		t.Fatal(err)
	}
	consumer := filepath.Join(tmp, "consumer")
	goMod := "module example.com/consumer\n\ngo 1.26.0\n\n" + mod + "\n"
	files := map[string]string{"go.mod": goMod}
	for i, p := range programs {
		if !strings.HasPrefix(strings.TrimSpace(stripComments(p.Text)), "package main") {
			t.Fatalf("%s:%d: a complete program must be package main", doc, p.Line)
		}
		files[filepath.Join(fmt.Sprintf("p%d", i+1), "main.go")] = p.Text + "\n"
	}
	for name, content := range files {
		path := filepath.Join(consumer, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := GoCommand(t, consumer, nil, "mod", "tidy"); err != nil {
		t.Fatalf("go mod tidy in the consumer module:\n%s\ngo.mod:\n%s", out, goMod)
	}
	bins := make([]string, len(programs))
	for i, p := range programs {
		bins[i] = filepath.Join(tmp, fmt.Sprintf("program%d", i+1))
		if out, err := GoCommand(t, consumer, nil, "build", "-o", bins[i], "./"+fmt.Sprintf("p%d", i+1)); err != nil {
			t.Fatalf("%s:%d: the program does not build from outside the repository:\n%s", doc, p.Line, out)
		}
	}
	return bins
}

// stripComments drops the leading // comment lines of a Go source.
func stripComments(src string) string {
	lines := strings.Split(src, "\n")
	for len(lines) > 0 && (strings.HasPrefix(strings.TrimSpace(lines[0]), "//") || strings.TrimSpace(lines[0]) == "") {
		lines = lines[1:]
	}
	return strings.Join(lines, "\n")
}
