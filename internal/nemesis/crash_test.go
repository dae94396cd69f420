package nemesis

import (
	"os/exec"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/internal/shardproc"
)

// providerRace is how a member dies of protoactor's etcd provider race.
const providerRace = `fatal error: concurrent map read and map write

goroutine 4121 [running]:
internal/runtime/maps.fatal({0x1d3a4c2?, 0x0?})
	/usr/local/go/src/runtime/panic.go:1058 +0x18
github.com/asynkron/protoactor-go/cluster/clusterproviders/etcd.(*Node).GetMeta(...)
	/root/go/pkg/mod/github.com/asynkron/protoactor-go@v0.0.0-20260118094027-288962e52f3f/cluster/clusterproviders/etcd/node.go:77
`

// dies starts a process that serves, then writes msg to its stderr and
// exits.
func dies(t *testing.T, name, msg string) *shardproc.Proc {
	return shardproc.StartCmd(t, name, func(string) *exec.Cmd {
		cmd := exec.Command("sh", "-c", `echo listening http://127.0.0.1:1; sleep 0.1; printf '%s' "$MSG" >&2; exit 2`)
		cmd.Env = append(cmd.Environ(), "MSG="+msg)
		return cmd
	})
}

// A member that died of the provider's race is a Crash at its exit and no
// longer live; one that died of anything else stays, for the checker to
// report.
func TestReapRecordsTheProviderRaceAsACrash(t *testing.T) {
	r := &Run{t: t, logf: t.Logf}
	raced := &Member{Name: "m1", proc: dies(t, "m1", "starting\n"+providerRace)}
	other := &Member{Name: "m2", proc: dies(t, "m2", "fatal error: concurrent map writes\n\ngoroutine 7 [running]:\nmain.main()\n")}
	r.members = []*Member{raced, other}
	for _, m := range r.members {
		for m.proc.Exited().IsZero() {
			time.Sleep(10 * time.Millisecond)
		}
	}
	live := r.Live()
	if len(live) != 1 || live[0] != other {
		t.Fatalf("live after the deaths: %v, want m2 only", live)
	}
	if len(r.faults) != 1 || r.faults[0].Kind != Crash || r.faults[0].Target != "m1" {
		t.Fatalf("faults: %+v, want one crash of m1", r.faults)
	}
	if at := raced.proc.Exited().UnixNano(); r.faults[0].Start != at || r.faults[0].End != at || raced.killed != at {
		t.Fatalf("the crash at %d–%d, m1 killed at %d; it exited at %d", r.faults[0].Start, r.faults[0].End, raced.killed, at)
	}
	r.Live()
	if len(r.faults) != 1 {
		t.Fatalf("a second look recorded the crash again: %+v", r.faults)
	}
}

// The faults reach the checker in the order they began, their serving
// times with them.
func TestFaultsByStart(t *testing.T) {
	faults := []Fault{{Kind: Pause, Start: 10}, {Kind: Kill, Start: 30}, {Kind: Crash, Start: 20}}
	fs, ss := faultsByStart(faults, []int64{11, 0, 21})
	if fs[0].Kind != Pause || fs[1].Kind != Crash || fs[2].Kind != Kill || ss[0] != 11 || ss[1] != 21 || ss[2] != 0 {
		t.Fatalf("ordered: %+v %v", fs, ss)
	}
	if faults[1].Kind != Kill {
		t.Fatal("the run's own faults were reordered")
	}
}
