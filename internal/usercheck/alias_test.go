package usercheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Import paths of the two workqueue packages, and the one way they are
// imported side by side (docs/tracing.md, "Controllers").
const (
	ourWorkqueue      = "github.com/actorinformer/actorinformer/workqueue"
	ourWorkqueueAlias = "aiworkqueue"
	clientGoWorkqueue = "k8s.io/client-go/util/workqueue"
)

// TestWorkqueueAlias: package workqueue has client-go's package name, so a
// controller imports ours as aiworkqueue and client-go's under its own name.
// Every Go file of the repository (both modules, examples, the demo) does
// the same, so that what users copy is consistent.
func TestWorkqueueAlias(t *testing.T) {
	root := RepoRoot(t)
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			name := ""
			if imp.Name != nil {
				name = imp.Name.Name
			}
			switch p {
			case ourWorkqueue:
				checked++
				if name != ourWorkqueueAlias {
					t.Errorf("%s imports %s as %q, want %s", rel, p, name, ourWorkqueueAlias)
				}
			case clientGoWorkqueue:
				checked++
				if name != "" {
					t.Errorf("%s imports %s as %q, want it unaliased (workqueue)", rel, p, name)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("only %d imports of either workqueue found: the walk missed files", checked)
	}
}
