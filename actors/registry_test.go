package actors

import (
	"log/slog"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// TestShrinkRegistry checks that an actor system the library creates keeps
// working with the smaller process registry: the event stream stays
// registered, actors spawn, get messages and leave the registry when they
// stop. Real time: it is protoactor's registry and mailboxes at work.
func TestShrinkRegistry(t *testing.T) {
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	sys := newActorSystem(slog.New(slog.DiscardHandler))
	runtime.GC()
	runtime.ReadMemStats(&m1)
	t.Logf("a new actor system holds %d kB", (int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/1024)
	defer sys.Shutdown()

	if n := len(sys.ProcessRegistry.LocalPIDs.LocalPIDs); n != registryBuckets {
		t.Fatalf("%d registry buckets, want %d", n, registryBuckets)
	}
	if p, ok := sys.ProcessRegistry.Get(actor.NewPID(sys.Address(), "eventstream")); !ok || p == sys.DeadLetter {
		t.Fatal("the event stream is no longer registered")
	}

	var got atomic.Int64
	pids := make([]*actor.PID, 100)
	for i := range pids {
		pid, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
			if _, ok := c.Message().(int); ok {
				got.Add(1)
			}
		}), "a"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		pids[i] = pid
	}
	for i, pid := range pids {
		sys.Root.Send(pid, i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() != int64(len(pids)) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got.Load() != int64(len(pids)) {
		t.Fatalf("%d of %d messages delivered", got.Load(), len(pids))
	}
	for i, pid := range pids {
		if _, ok := sys.ProcessRegistry.Get(pid); !ok {
			t.Fatalf("actor %d is not registered", i)
		}
		if err := sys.Root.StopFuture(pid).Wait(); err != nil {
			t.Fatal(err)
		}
		if _, ok := sys.ProcessRegistry.Get(pid); ok {
			t.Fatalf("actor %d is still registered after it stopped", i)
		}
	}
}

// TestNewActorSystem: the exported constructor applies protoactor's
// options and gives the small registry.
func TestNewActorSystem(t *testing.T) {
	sys := NewActorSystem(actor.WithDeadLetterThrottleCount(7))
	defer sys.Shutdown()
	if n := len(sys.ProcessRegistry.LocalPIDs.LocalPIDs); n != registryBuckets {
		t.Fatalf("%d registry buckets, want %d", n, registryBuckets)
	}
	if got := sys.Config.DeadLetterThrottleCount; got != 7 {
		t.Fatalf("DeadLetterThrottleCount %d, want the option's 7", got)
	}
}
