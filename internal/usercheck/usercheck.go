// Package usercheck checks the library as its users meet it: the code
// blocks of README.md and docs/*.md against the tested examples they come
// from, the options that must not compile where they would do nothing, the
// package aliases the examples use, and the ctrlruntime module consumed
// from a module outside the repository. Its helpers run the go command;
// its tests live in this package and in the ctrlruntime module.
package usercheck

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// RepoRoot is the repository's root directory (where README.md is).
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("usercheck: no caller information")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "README.md")); err != nil {
		t.Fatalf("usercheck: repository root not found from %s: %v", file, err)
	}
	return root
}

// GoCommand runs the go command in dir with args and returns its combined
// output and error. GOFLAGS is cleared (so that -mod and the like come from
// args only) and GOWORK is off.
func GoCommand(t testing.TB, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}

// Want marks the line of a Go source given to CheckCompileErrors that must
// not compile: the compiler's error on that line must contain the text
// after the marker.
const Want = "// want: "

// CheckCompileErrors builds src as a package of the module rooted at
// moduleDir (through an overlay: nothing is written into the repository)
// and checks that the lines marked with Want, and only those, fail, each
// with an error containing its expected text. With no Want marker, src must
// build.
func CheckCompileErrors(t *testing.T, moduleDir, name, src string) {
	t.Helper()
	tmp := t.TempDir()
	pkgDir := filepath.Join(moduleDir, "zz_usercheck_"+name)
	if _, err := os.Stat(pkgDir); err == nil {
		t.Fatalf("%s exists; the overlay needs a directory that does not", pkgDir)
	}
	file := filepath.Join(pkgDir, name+".go")
	srcPath := filepath.Join(tmp, name+".go")
	if err := os.WriteFile(srcPath, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {file: srcPath}})
	overlayPath := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayPath, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	// -gcflags=-e: every error, not the first ten.
	out, err := GoCommand(t, moduleDir, nil, "build", "-overlay", overlayPath, "-gcflags=-e", "./"+filepath.Base(pkgDir))

	want := map[int]string{}
	for i, line := range strings.Split(src, "\n") {
		if _, w, ok := strings.Cut(line, Want); ok {
			want[i+1] = w
		}
	}
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("%s does not build:\n%s", name, out)
		}
		return
	}
	if err == nil {
		t.Fatalf("%s builds, but %d of its lines must not", name, len(want))
	}
	errLine := regexp.MustCompile(`(?m)^(?:\./)?(?:[^:\n]*` + regexp.QuoteMeta(name) + `\.go):(\d+):\d+: (.*)$`)
	got := map[int][]string{}
	for _, m := range errLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		got[n] = append(got[n], m[2])
	}
	if len(got) == 0 {
		t.Fatalf("%s: no compile error found in the go command's output:\n%s", name, out)
	}
	lines := make([]int, 0, len(want))
	for n := range want {
		lines = append(lines, n)
	}
	slices.Sort(lines)
	for _, n := range lines {
		msgs := got[n]
		if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, want[n]) }) {
			t.Errorf("%s:%d must fail with %q; errors there: %q", name, n, want[n], msgs)
		}
		delete(got, n)
	}
	for n, msgs := range got {
		t.Errorf("%s:%d: unexpected error %q", name, n, msgs)
	}
	if t.Failed() {
		t.Logf("go build output:\n%s", out)
	}
}
