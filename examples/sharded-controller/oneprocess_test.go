package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// oneProcess are the lines of main.go that differ in the same controller
// written for one process, with leader election: each line of main.go
// (whole, with its indentation) and what it is there ("" when the line is
// not there at all). An import the one-process version has and this one
// has not is inserted after the line given.
var oneProcess = []struct{ sharded, single string }{
	{"\tsharded := newSharded(ctx, cfg, meters) // member.go: the cluster member, made and stopped by the manager's cache", ""},
	{"\tmgr, err := ctrl.NewManager(restConfig, ctrl.Options{NewCache: sharded.NewCache, Metrics: metricsserver.Options{BindAddress: cfg.metricsAddress, ExtraHandlers: sharded.status()},",
		"\tmgr, err := ctrl.NewManager(restConfig, ctrl.Options{LeaderElection: true, LeaderElectionID: \"sharded-controller\", LeaderElectionNamespace: cfg.namespace, Metrics: metricsserver.Options{BindAddress: cfg.metricsAddress},"},
	{"\tif err := mgr.AddHealthzCheck(\"shard\", sharded.CheckLive); err != nil {", "\tif err := mgr.AddHealthzCheck(\"ping\", healthz.Ping); err != nil {"},
	{"\tif err := mgr.AddReadyzCheck(\"shard\", sharded.ready); err != nil {", "\tif err := mgr.AddReadyzCheck(\"ping\", healthz.Ping); err != nil {"},
	{"\t\tComplete(sharded.Reconciler(r))", "\t\tComplete(r)"},
}

const importAfter, oneProcessImport = "\t\"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil\"", "\t\"sigs.k8s.io/controller-runtime/pkg/healthz\""

// The sharded controller differs from its one-process version, with
// leader election, by at most 10 lines of main.go (member.go, the cluster
// member, is the rest): the one-process version is made from main.go with
// oneProcess, builds (with api.go; without member.go), and its line diff
// with main.go is the diff docs/integration.md shows.
func TestOneProcessDiff(t *testing.T) {
	b, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	sharded := strings.Split(string(b), "\n")
	var single []string
	for _, l := range sharded {
		i := slices.IndexFunc(oneProcess, func(d struct{ sharded, single string }) bool { return d.sharded == l })
		switch {
		case i >= 0 && oneProcess[i].single != "":
			single = append(single, oneProcess[i].single)
		case i >= 0:
		case l == importAfter:
			single = append(single, l, oneProcessImport)
		default:
			single = append(single, l)
		}
	}
	for _, d := range oneProcess {
		if !slices.Contains(sharded, d.sharded) {
			t.Errorf("main.go has no line %q", d.sharded)
		}
	}
	// It builds: a package of its own in the module, with api.go.
	dir, err := os.MkdirTemp(".", "_oneprocess")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	api, err := os.ReadFile("api.go")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "api.go"), api, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(strings.Join(single, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+filepath.Base(dir)).CombinedOutput(); err != nil {
		t.Fatalf("the one-process version does not build: %v\n%s", err, out)
	}
	if out, err := exec.Command("go", "vet", "./"+filepath.Base(dir)).CombinedOutput(); err != nil {
		t.Fatalf("the one-process version: go vet: %v\n%s", err, out)
	}

	removed, added := lineDiff(single, sharded)
	if n := len(removed) + len(added); n > 10 {
		t.Errorf("the sharded version differs from the one-process one by %d lines, want at most 10", n)
	}
	t.Logf("%d lines removed, %d added", len(removed), len(added))
	docRemoved, docAdded := docDiff(t)
	if !slices.Equal(docRemoved, removed) || !slices.Equal(docAdded, added) {
		t.Errorf("docs/integration.md's diff:\n-%s\n+%s\nthe lines that differ:\n-%s\n+%s",
			strings.Join(docRemoved, "\n-"), strings.Join(docAdded, "\n+"), strings.Join(removed, "\n-"), strings.Join(added, "\n+"))
	}
}

// lineDiff returns the lines of a not in b's longest common subsequence
// with it, and those of b not in a's, in order.
func lineDiff(a, b []string) (removed, added []string) {
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			i++
			j++
		case lcs[i+1][j] >= lcs[i][j+1]:
			removed = append(removed, a[i])
			i++
		default:
			added = append(added, b[j])
			j++
		}
	}
	return append(removed, a[i:]...), append(added, b[j:]...)
}

// docDiff returns the removed and added lines of the diff block of
// docs/integration.md that names TestOneProcessDiff.
func docDiff(t *testing.T) (removed, added []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "integration.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "TestOneProcessDiff (examples/sharded-controller)")
	if !ok {
		t.Fatal("docs/integration.md has no diff block naming TestOneProcessDiff")
	}
	_, block, _ = strings.Cut(block, "```diff\n")
	block, _, _ = strings.Cut(block, "```")
	for _, l := range strings.Split(strings.TrimSuffix(block, "\n"), "\n") {
		switch {
		case strings.HasPrefix(l, "-"):
			removed = append(removed, l[1:])
		case strings.HasPrefix(l, "+"):
			added = append(added, l[1:])
		default:
			t.Errorf("docs/integration.md's diff has a line that is neither removed nor added: %q", l)
		}
	}
	return removed, added
}
