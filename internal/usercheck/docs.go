package usercheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The doc check: every code block of README.md and docs/*.md is either the
// exact text of a snippet region of a test that runs it, or opts out with
// SkipMarker on the line just above its opening fence, followed by the
// reason (shell commands, diagrams, sample output, go.mod lines tested
// elsewhere).
//
// A snippet region is a run of lines of a _test.go file (of either module)
// between
//
//	// doc:begin docs/integration.md
//	...
//	// doc:end
//
// naming the document it appears in. Its lines, less their common
// indentation, must equal a Go block of that document, and the function
// it is in must run under go test: a Test function, an Example with an
// output comment, or a function of the same package that one of those
// calls.
const (
	// SkipMarker opens the HTML comment that exempts the next code block:
	// <!-- doccheck: skip: shell commands, run by hack/test.sh -->.
	SkipMarker = "<!-- doccheck: skip: "
	// RegionBegin and RegionEnd delimit a snippet region in a test file.
	RegionBegin = "// doc:begin "
	RegionEnd   = "// doc:end"
)

// Block is a code block of a Markdown document.
type Block struct {
	Doc  string // path relative to the repository root, with slashes
	Line int    // line of the opening fence
	Info string // the info string: "go", "sh", "" ...
	Text string // the lines between the fences, less the fence's indentation
	Skip string // the reason given with SkipMarker; "" when not skipped
}

// Region is a snippet region of a test file.
type Region struct {
	File string // path relative to the repository root
	Line int    // line of the begin marker
	Doc  string // the document it belongs to
	Text string // its lines, less their common indentation
	Func string // the top-level function it is in
	Runs bool   // that function runs under go test
}

var fence = regexp.MustCompile("^([ \t]*)(```+|~~~+)[ \t]*([^`]*)$")

// ParseBlocks returns the code blocks of a Markdown document, and the
// problems found: indented code blocks (which cannot carry a skip marker or
// an info string), unclosed fences, skip markers without a reason or a
// block.
func ParseBlocks(doc, text string) ([]Block, []string) {
	lines := strings.Split(text, "\n")
	var blocks []Block
	var problems []string
	inList := false
	prevBlank := true
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		m := fence.FindStringSubmatch(line)
		if m == nil {
			trimmed := strings.TrimLeft(line, " \t")
			blank := trimmed == ""
			indented := strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t")
			switch {
			case blank:
			case !indented && isListItem(trimmed) && len(line)-len(trimmed) < 4:
				inList = true
			case !indented && prevBlank && !strings.HasPrefix(line, " "):
				inList = false
			case indented && prevBlank && !inList:
				problems = append(problems, fmt.Sprintf("%s:%d: indented code block: write it as a fenced block (with %s... if it is not Go)", doc, i+1, SkipMarker))
			}
			if strings.Contains(line, SkipMarker) {
				if i+1 >= len(lines) || fence.FindStringSubmatch(lines[i+1]) == nil {
					problems = append(problems, fmt.Sprintf("%s:%d: %s must be on the line just above a code block's opening fence", doc, i+1, strings.TrimSpace(SkipMarker)))
				}
			}
			prevBlank = blank
			continue
		}
		indent, marks, info := m[1], m[2], strings.TrimSpace(m[3])
		b := Block{Doc: doc, Line: i + 1, Info: info}
		if i > 0 {
			prev := strings.TrimSpace(lines[i-1])
			if rest, ok := strings.CutPrefix(prev, strings.TrimSpace(SkipMarker)); ok {
				reason := strings.TrimSpace(strings.TrimSuffix(rest, "-->"))
				if len(strings.Fields(reason)) < 2 || !strings.HasSuffix(rest, "-->") {
					problems = append(problems, fmt.Sprintf("%s:%d: a skip marker needs a reason and a closing -->: %q", doc, i, prev))
				}
				b.Skip = reason
				if b.Skip == "" {
					b.Skip = "?"
				}
			}
		}
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			t := strings.TrimLeft(lines[i], " \t")
			if strings.HasPrefix(t, marks) && strings.Trim(t, marks[:1]+" \t") == "" {
				closed = true
				break
			}
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		if !closed {
			problems = append(problems, fmt.Sprintf("%s:%d: code block not closed", doc, b.Line))
		}
		b.Text = strings.Join(body, "\n")
		blocks = append(blocks, b)
		prevBlank = false
	}
	return blocks, problems
}

func isListItem(s string) bool {
	if strings.HasPrefix(s, "- ") || strings.HasPrefix(s, "* ") || strings.HasPrefix(s, "+ ") {
		return true
	}
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n > 0 && n+1 < len(s) && (s[n] == '.' || s[n] == ')') && s[n+1] == ' '
}

// Documents returns the Markdown documents the check covers: README.md and
// docs/*.md, relative to root, with slashes.
func Documents(root string) ([]string, error) {
	docs := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		docs = append(docs, filepath.ToSlash(rel))
	}
	slices.Sort(docs[1:])
	return docs, nil
}

// Regions returns the snippet regions of every _test.go file under root
// (hidden directories and testdata excepted).
func Regions(root string) ([]Region, []string, error) {
	var regions []Region
	var problems []string
	byDir := map[string][]string{}
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
		if strings.HasSuffix(path, "_test.go") {
			byDir[filepath.Dir(path)] = append(byDir[filepath.Dir(path)], path)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	dirs := make([]string, 0, len(byDir))
	for d := range byDir {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	for _, dir := range dirs {
		r, p, err := dirRegions(root, byDir[dir])
		if err != nil {
			return nil, nil, err
		}
		regions = append(regions, r...)
		problems = append(problems, p...)
	}
	return regions, problems, nil
}

// dirRegions finds the regions of one directory's test files (one package,
// or a package and its external test package, which call each other's
// functions only through exported names: enough for this check).
func dirRegions(root string, files []string) ([]Region, []string, error) {
	fset := token.NewFileSet()
	type parsed struct {
		path string
		src  []byte
		f    *ast.File
	}
	var all []parsed
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		if !strings.Contains(string(src), RegionBegin) && !strings.Contains(string(src), "func Test") && !strings.Contains(string(src), "func Example") {
			continue
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return nil, nil, err
		}
		all = append(all, parsed{path, src, f})
	}
	// The functions that run, and the names they refer to.
	called := map[string]bool{}
	runs := func(fd *ast.FuncDecl, f *ast.File) bool {
		name := fd.Name.Name
		if fd.Recv != nil {
			return false
		}
		if strings.HasPrefix(name, "Test") {
			return true
		}
		if strings.HasPrefix(name, "Example") {
			for _, cg := range f.Comments {
				if cg.Pos() < fd.Body.Lbrace || cg.End() > fd.Body.Rbrace {
					continue
				}
				for _, c := range cg.List {
					t := strings.TrimSpace(strings.TrimPrefix(c.Text, "//"))
					if strings.HasPrefix(t, "Output:") || strings.HasPrefix(t, "Unordered output:") {
						return true
					}
				}
			}
		}
		return false
	}
	for _, p := range all {
		for _, decl := range p.f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil || !runs(fd, p.f) {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok {
					called[id.Name] = true
				}
				return true
			})
		}
	}
	var regions []Region
	var problems []string
	for _, p := range all {
		rel, _ := filepath.Rel(root, p.path)
		rel = filepath.ToSlash(rel)
		lines := strings.Split(string(p.src), "\n")
		for i := 0; i < len(lines); i++ {
			t := strings.TrimSpace(lines[i])
			doc, ok := strings.CutPrefix(t, RegionBegin)
			if !ok {
				if t == RegionEnd {
					problems = append(problems, fmt.Sprintf("%s:%d: %s without %s", rel, i+1, RegionEnd, strings.TrimSpace(RegionBegin)))
				}
				continue
			}
			r := Region{File: rel, Line: i + 1, Doc: strings.TrimSpace(doc)}
			var body []string
			j := i + 1
			for ; j < len(lines) && strings.TrimSpace(lines[j]) != RegionEnd; j++ {
				if strings.Contains(lines[j], RegionBegin) {
					break
				}
				body = append(body, lines[j])
			}
			if j >= len(lines) || strings.TrimSpace(lines[j]) != RegionEnd {
				problems = append(problems, fmt.Sprintf("%s:%d: snippet region not closed by %s", rel, i+1, RegionEnd))
				continue
			}
			r.Text = dedent(body)
			pos := p.f.FileStart + token.Pos(lineOffset(p.src, i+1))
			for _, decl := range p.f.Decls {
				if fd, ok := decl.(*ast.FuncDecl); ok && fd.Body != nil && fd.Body.Lbrace < pos && pos < fd.Body.Rbrace {
					r.Func = fd.Name.Name
					r.Runs = runs(fd, p.f) || (fd.Recv == nil && called[fd.Name.Name])
				}
			}
			regions = append(regions, r)
			i = j
		}
	}
	return regions, problems, nil
}

// lineOffset is the byte offset of the start of line n (1-based) in src.
func lineOffset(src []byte, n int) int {
	off := 0
	for l := 1; l < n; l++ {
		k := strings.IndexByte(string(src[off:]), '\n')
		if k < 0 {
			return len(src)
		}
		off += k + 1
	}
	return off
}

// dedent removes the indentation common to the non-blank lines, and blank
// lines at either end.
func dedent(lines []string) string {
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	prefix := ""
	first := true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ind := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if first {
			prefix, first = ind, false
			continue
		}
		for !strings.HasPrefix(ind, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimRight(strings.TrimPrefix(l, prefix), " \t")
	}
	return strings.Join(out, "\n")
}

// Normalize is how a Go block's text is compared with a region's: blank
// lines at either end and trailing spaces removed.
func Normalize(text string) string {
	return dedent(strings.Split(text, "\n"))
}
