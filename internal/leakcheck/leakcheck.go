// Package leakcheck holds the goleak options every test package of the
// module uses: the goroutines listed here outlive a test without being leaks.
package leakcheck

import "go.uber.org/goleak"

// Options returns the module's goleak options followed by extra.
//
//   - klog's flush daemon lives as long as the process.
//   - client-go's informer, run side by side as the reference in some tests,
//     leaves its watch broadcaster's loop behind until it winds down.
//   - protoactor's dead-letter throttle starts a timer goroutine on the first
//     dead letter of each interval (1 s by default) and it ends when the
//     interval does, even after the actor system has shut down. A message
//     sent to an actor that has just stopped is enough to start one. The
//     closure is named differently depending on whether NewThrottle was
//     inlined into NewDeadLetter, so both names are listed.
func Options(extra ...goleak.Option) []goleak.Option {
	return append([]goleak.Option{
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run"),
		goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*Broadcaster).loop"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewThrottle.func1.1"),
	}, extra...)
}
