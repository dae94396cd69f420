package usercheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// patternsAnchor is the section of docs/tracing.md that says which tracing
// pattern serves which purpose.
const patternsAnchor = "tracing.md#which-pattern-child-spans-or-links"

// TestTracingPatternGuidance: the two ways of tracing the work that follows
// a delta (child spans for a handler's own work, links for a workqueue's
// reconciles) are explained in one section of docs/tracing.md, which the
// README and docs/integration.md point to, and no example shows a third way
// (a queue item carrying trace IDs so that the reconcile becomes a child
// span: it defeats the queue's merging of a key's adds).
func TestTracingPatternGuidance(t *testing.T) {
	root := RepoRoot(t)
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tracing := read("docs/tracing.md")
	section := ""
	if i := strings.Index(tracing, "\n## Which pattern: child spans or links\n"); i >= 0 {
		section = tracing[i+1:]
		if j := strings.Index(section[3:], "\n## "); j >= 0 {
			section = section[:j+3]
		}
	}
	if section == "" {
		t.Fatal(`docs/tracing.md has no "## Which pattern: child spans or links" section`)
	}
	for _, want := range []string{"**children**", "**linked**", "Example_controller", "ExampleContextEventHandlerFuncs", "Do not put trace or span IDs into workqueue items"} {
		if !strings.Contains(section, want) {
			t.Errorf("the Which pattern section lacks %q", want)
		}
	}
	for _, doc := range []string{"README.md", "docs/integration.md"} {
		if !strings.Contains(read(doc), patternsAnchor) {
			t.Errorf("%s does not point to %s", doc, patternsAnchor)
		}
	}
	readme := read("README.md")
	if !strings.Contains(readme, "**linked**") || strings.Contains(readme, "carry each delta's trace on to") {
		t.Error("README.md must say that the workqueue's processing is linked to the deltas, not that it carries their trace on")
	}

	// No example builds a parent span context out of IDs it carried
	// through a queue.
	fset := token.NewFileSet()
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
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil || !strings.HasPrefix(fd.Name.Name, "Example") {
				continue
			}
			var spanFromIDs, queue bool
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok {
						spanFromIDs = spanFromIDs || (x.Name == "trace" && sel.Sel.Name == "NewSpanContext")
						queue = queue || x.Name == "workqueue" || x.Name == "aiworkqueue"
					}
				}
				return true
			})
			if spanFromIDs && queue {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s: %s carries trace IDs through a workqueue: show the linked pattern (package workqueue) instead", rel, fd.Name.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
