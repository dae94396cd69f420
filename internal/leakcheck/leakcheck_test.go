package leakcheck

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"
)

// TestDeadLetterThrottleIgnored starts protoactor's dead-letter throttle
// timer, then checks that goleak without the module's options reports it
// (so the name is right and the check can fail) and with them does not.
func TestDeadLetterThrottleIgnored(t *testing.T) {
	sys := actor.NewActorSystem()
	pid, err := sys.Root.SpawnNamed(actor.PropsFromFunc(func(actor.Context) {}), "gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	sys.Root.Send(pid, "to a stopped actor")
	sys.Shutdown()

	if err := goleak.Find(goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1")); err == nil {
		t.Fatal("no goroutine found without the options: the dead letter did not start the throttle timer, so this test checks nothing")
	} else {
		t.Logf("without the options: %v", err)
	}
	if err := goleak.Find(Options()...); err != nil {
		t.Fatalf("with the options: %v", err)
	}
}
