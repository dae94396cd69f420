package shardproc

import (
	"strings"
	"testing"
)

// A process that exits before it serves is reported, with its log, and
// does not fail the test.
func TestTryStartReportsAnEarlyExit(t *testing.T) {
	p, log := TryStart(t, "/bin/sh", "early", "-c", "echo 'bind: address already in use' >&2; exit 2")
	if p != nil {
		t.Fatal("a process that exited at start was reported as started")
	}
	if !strings.Contains(log, "address already in use") {
		t.Fatalf("the log says %q", log)
	}
}

// A process that says where it listens is started.
func TestTryStartStarts(t *testing.T) {
	p, log := TryStart(t, "/bin/sh", "served", "-c", "echo listening http://127.0.0.1:1; sleep 30")
	if p == nil {
		t.Fatalf("not started: %s", log)
	}
	if p.URL != "http://127.0.0.1:1" {
		t.Fatalf("URL %q", p.URL)
	}
}

// Only a concurrent-map fault with the etcd provider on the failing
// stack is the provider's race.
func TestProviderRace(t *testing.T) {
	stack := "\n\ngoroutine 9 [running]:\ngithub.com/asynkron/protoactor-go/cluster/clusterproviders/etcd.(*Node).GetMeta(...)\n"
	for _, c := range []struct {
		log  string
		want bool
	}{
		{"fatal error: concurrent map read and map write" + stack, true},
		{"fatal error: concurrent map writes\n\ngoroutine 9 [running]:\nmain.main()\n", false},
		{"panic: boom" + stack, false},
		{"fatal error: concurrent map writes" + stack + "fatal error: concurrent map writes\n\ngoroutine 1 [running]:\nmain.main()\n", false},
	} {
		if got := ProviderRace(c.log); got != c.want {
			t.Errorf("ProviderRace(%q) = %v", c.log, got)
		}
	}
}
