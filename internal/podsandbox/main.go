// Command podsandbox runs a command as a pod's container sees the world,
// for tests of programs that read what the kubelet gives a pod:
//
//	podsandbox -hostname POD -serviceaccount DIR [-env K=V]... -- CMD ARGS...
//
// It sets the hostname to the pod's name, mounts a tmpfs with DIR's files
// (token, ca.crt, namespace) at /var/run/secrets/kubernetes.io/serviceaccount,
// sets the environment variables, and executes CMD. It must be started in
// UTS and mount namespaces of its own (internal/kubeletsim does that);
// it refuses to run in its parent's, whose hostname and /var/run it would
// change. Linux only.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// saDir is where a pod's service account is mounted, the path client-go's
// rest.InClusterConfig and protoactor's k8s provider read.
const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

type envFlags []string

func (e *envFlags) String() string { return strings.Join(*e, ",") }
func (e *envFlags) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("-env %q: want KEY=VALUE", v)
	}
	*e = append(*e, v)
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "podsandbox:", err)
		os.Exit(125)
	}
}

func run() error {
	hostname := flag.String("hostname", "", "the pod's name")
	sa := flag.String("serviceaccount", "", "a directory with the service account's token, ca.crt and namespace")
	var env envFlags
	flag.Var(&env, "env", "KEY=VALUE for the command, repeatable")
	flag.Parse()
	args := flag.Args()
	if *hostname == "" || *sa == "" || len(args) == 0 {
		return errors.New("usage: podsandbox -hostname POD -serviceaccount DIR [-env K=V]... -- CMD ARGS...")
	}
	for _, ns := range []string{"uts", "mnt"} {
		own, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return err
		}
		parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", os.Getppid(), ns))
		if errors.Is(err, os.ErrPermission) {
			// A parent we have no rights over: nor over its namespaces,
			// which sethostname and mount would then fail to change.
			continue
		}
		if err != nil {
			return err
		}
		if own == parent {
			return fmt.Errorf("started in its parent's %s namespace (%s): it would change the host's; start it in a namespace of its own", ns, own)
		}
	}
	// Nothing mounted here may reach the parent's namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := syscall.Sethostname([]byte(*hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := mountServiceAccount(*sa); err != nil {
		return err
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	bin, err := exec.LookPath(args[0])
	if err != nil {
		return err
	}
	return syscall.Exec(bin, args, os.Environ())
}

// mountServiceAccount puts the files of dir at saDir, on a tmpfs mounted
// on its closest existing ancestor (this mount namespace's only).
func mountServiceAccount(dir string) error {
	target := saDir
	for {
		if st, err := os.Stat(target); err == nil && st.IsDir() {
			break
		}
		parent := filepath.Dir(target)
		if parent == target {
			return fmt.Errorf("no directory to mount on for %s", saDir)
		}
		target = parent
	}
	if err := syscall.Mount("tmpfs", target, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", target, err)
	}
	if err := os.MkdirAll(saDir, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"token", "ca.crt", "namespace"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(saDir, f), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
