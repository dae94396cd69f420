package usercheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestTelemetryNames: every attribute key, span and metric name the
// library's code defines (an attribute.Key, a Span* or Metric* constant, a
// name given to a meter's instrument) is listed in docs/tracing.md, every
// key follows the one scheme (a semantic convention's k8s.* key, or
// actorinformer.* in lower case), no two attribute constants share a key,
// and no two exported Attr* constants share a name.
func TestTelemetryNames(t *testing.T) {
	root := RepoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "tracing.md"))
	if err != nil {
		t.Fatal(err)
	}
	keyRE := regexp.MustCompile(`^(k8s\.[a-z_.]+|actorinformer(\.[a-z][a-z0-9_]*)+)$`)
	instrument := regexp.MustCompile(`^(Int64|Float64)(Observable)?(Counter|UpDownCounter|Histogram|Gauge)$`)
	keys := map[string]string{}   // key → where
	consts := map[string]string{} // Attr* name → where
	names := map[string]string{}  // span and metric names → where
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", ".cache", "cmd", "e2e", "bench", "hack", "internal":
				return filepath.SkipDir // not the library's names
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if i >= len(n.Values) {
						break
					}
					lit := stringArg(n.Values[i], "Key")
					if lit == "" {
						lit = stringLit(n.Values[i])
					}
					where := fset.Position(id.Pos()).String()
					switch {
					case strings.HasPrefix(id.Name, "Attr") && id.IsExported():
						if prev, ok := consts[id.Name]; ok {
							t.Errorf("%s: constant %s already defined at %s", where, id.Name, prev)
						}
						consts[id.Name] = where
						if prev, ok := keys[lit]; ok {
							t.Errorf("%s: key %q already defined at %s", where, lit, prev)
						}
						keys[lit] = where
					case (strings.HasPrefix(id.Name, "Span") || strings.HasPrefix(id.Name, "Metric")) && lit != "":
						names[lit] = where
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && instrument.MatchString(sel.Sel.Name) && len(n.Args) > 0 {
					if lit := stringLit(n.Args[0]); lit != "" {
						names[lit] = fset.Position(n.Pos()).String()
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 20 || len(names) < 20 {
		t.Fatalf("found %d keys and %d span and metric names: the walk missed the library", len(keys), len(names))
	}
	for k, where := range keys {
		if !keyRE.MatchString(k) {
			t.Errorf("%s: key %q is not actorinformer.{object}.{property} nor a k8s.* convention", where, k)
		}
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("%s: key %q is not in docs/tracing.md", where, k)
		}
	}
	for n, where := range names {
		if !strings.Contains(string(doc), "`"+n+"`") {
			t.Errorf("%s: span or metric %q is not in docs/tracing.md", where, n)
		}
	}
}

// stringArg returns the string literal argument of a call to a function
// named fn (attribute.Key("…")), or "".
func stringArg(e ast.Expr, fn string) string {
	c, ok := e.(*ast.CallExpr)
	if !ok || len(c.Args) != 1 {
		return ""
	}
	if sel, ok := c.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != fn {
		return ""
	}
	return stringLit(c.Args[0])
}

func stringLit(e ast.Expr) string {
	b, ok := e.(*ast.BasicLit)
	if !ok || b.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(b.Value)
	if err != nil {
		return ""
	}
	return s
}
