package testcluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const (
	// EnvBinDir names the environment variable that overrides the bin
	// directory (default <repo>/.cache/bin).
	EnvBinDir = "ACTORINFORMER_BIN_DIR"
	// EnvRequireCluster names the environment variable that turns a missing
	// binary from t.Skip into t.Fatal. CI sets it.
	EnvRequireCluster = "ACTORINFORMER_REQUIRE_CLUSTER"

	// Binary names in the bin directory.
	KubeAPIServerBinary = "kube-apiserver"
	EtcdBinary          = "etcd"
	JaegerBinary        = "jaeger"

	modulePath = "github.com/actorinformer/actorinformer"
)

// BinDir returns the directory that holds the test binaries: the value of
// $ACTORINFORMER_BIN_DIR if set (made absolute against the repository root
// when relative), else <repo>/.cache/bin. The directory need not exist.
func BinDir() (string, error) {
	dir := os.Getenv(EnvBinDir)
	if dir != "" && filepath.IsAbs(dir) {
		return filepath.Clean(dir), nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	if dir != "" {
		return filepath.Join(root, dir), nil
	}
	return filepath.Join(root, ".cache", "bin"), nil
}

// RepoRoot returns the root of the actorinformer repository: the closest
// directory, from the working directory upwards, whose go.mod declares the
// module github.com/actorinformer/actorinformer. If there is none (a test
// binary run elsewhere), it falls back to the location of this source file.
func RepoRoot() (string, error) {
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; {
			if isRepoRoot(dir) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
		if isRepoRoot(dir) {
			return dir, nil
		}
	}
	return "", errors.New("testcluster: cannot find the repository root " +
		"(no go.mod of module " + modulePath + " above the working directory); set " + EnvBinDir)
}

func isRepoRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == modulePath
		}
	}
	return false
}

// binPath returns the absolute path of an executable binary in BinDir, or an
// error that says what is missing and how to build it.
func binPath(name string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, name)
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("testcluster: %s not found in %s (run hack/build-binaries.sh%s): %w",
			name, dir, buildTarget(name), err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("testcluster: %s is not an executable file", p)
	}
	return p, nil
}

func buildTarget(name string) string {
	if name == JaegerBinary {
		return " jaeger"
	}
	return " kube"
}

// Available reports whether kube-apiserver and etcd are in BinDir; the error
// names the first missing one.
func Available() error {
	return available(KubeAPIServerBinary, EtcdBinary)
}

// JaegerAvailable reports whether the jaeger binary is in BinDir.
func JaegerAvailable() error {
	return available(JaegerBinary)
}

func available(names ...string) error {
	for _, n := range names {
		if _, err := binPath(n); err != nil {
			return err
		}
	}
	return nil
}

// RequireBinaries skips the test (or fails it when
// $ACTORINFORMER_REQUIRE_CLUSTER is set) unless every named binary is in
// BinDir. With no names it requires kube-apiserver and etcd.
func RequireBinaries(t testing.TB, names ...string) {
	t.Helper()
	if len(names) == 0 {
		names = []string{KubeAPIServerBinary, EtcdBinary}
	}
	if err := available(names...); err != nil {
		skipOrFatal(t, err)
	}
}

// RequireCluster reports whether $ACTORINFORMER_REQUIRE_CLUSTER is set.
func RequireCluster() bool { return os.Getenv(EnvRequireCluster) != "" }

func skipOrFatal(t testing.TB, err error) {
	t.Helper()
	if RequireCluster() {
		t.Fatalf("%v (%s is set, so this is a failure, not a skip)", err, EnvRequireCluster)
	}
	t.Skipf("%v (set %s to make this a failure)", err, EnvRequireCluster)
}
