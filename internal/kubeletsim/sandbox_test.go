package kubeletsim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The sandbox gives the command the pod's hostname, the service account's
// files where a pod has them, and the environment; the host keeps its own
// hostname and /var/run.
func TestSandbox(t *testing.T) {
	sandbox, err := BuildSandbox()
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	dir := t.TempDir()
	for f, v := range map[string]string{"token": "tok", "ca.crt": "ca", "namespace": "ns1"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := Sandbox(sandbox, "pod-1", dir, []string{"FOO=bar"}, "sh", "-c",
		`hostname; d=/var/run/secrets/kubernetes.io/serviceaccount; cat $d/namespace $d/token $d/ca.crt; echo; echo $FOO`)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got, want := string(out), "pod-1\nns1tokca\nbar\n"; got != want {
		t.Errorf("in the sandbox: %q, want %q", got, want)
	}
	if h, _ := os.Hostname(); h != host {
		t.Errorf("the host's hostname changed from %q to %q", host, h)
	}
	if _, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token"); err == nil {
		t.Error("the host has a service account token at /var/run/secrets/kubernetes.io/serviceaccount")
	}
}

// Started without namespaces of its own, the sandbox refuses to run: it
// would change the host's hostname and /var/run.
func TestSandboxRefusesTheHostsNamespaces(t *testing.T) {
	sandbox, err := BuildSandbox()
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	out, err := exec.Command(sandbox, "-hostname", "pod-1", "-serviceaccount", t.TempDir(), "--", "true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "namespace") {
		t.Fatalf("err %v, output %q; want a refusal", err, out)
	}
	if h, _ := os.Hostname(); h != host {
		t.Errorf("the host's hostname changed from %q to %q", host, h)
	}
}
