package actors

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/listener"
	"github.com/actorinformer/actorinformer/telemetry"
)

// handlerListener is the informer's side of one handler's listener: the
// listener stage's core and its handler call path (package listener), and
// what the informer keeps for the handler's registration. The atomics are
// read by other goroutines (HasSynced, Stats, metrics).
type handlerListener struct {
	core    *listener.Core
	id      indexer.ListenerID
	name    string
	handler ContextEventHandler
	// coalesce is set for a Coalesced handler.
	coalesce bool
	// resync is the resync period in force (0: none); requestedResync the
	// handler's request after the minimum is applied (client-go's
	// requestedResyncPeriod); added is when the handler was added, from
	// which its first resync period counts. Set before the listener
	// subscribes, under the informer's lock.
	resync          time.Duration
	requestedResync time.Duration
	added           time.Time
	tel             *telemetry.T
	// histEvery is the handler's share of measured calls
	// (listener.HandlerConfig.HistogramEvery).
	histEvery int

	// sent is the indexer's count of what it sent the listener; counters
	// the listener's own. The backlog gauge reads both.
	sent     indexer.Sent
	counters listener.Counters
	backlog  *telemetry.Backlog
	// removed is set by RemoveEventHandler: from then on the handler is
	// not called, even for notifications already in the mailbox.
	removed atomic.Bool
	// halted is the informer's: set when it stops, so that a listener in
	// the middle of a large batch drops the rest instead of delaying the
	// stop (client-go's listeners drop what they hold when stopped, too).
	halted *atomic.Bool
	// synced is told when the listener has delivered its last pending
	// initial notification or its initial batch: registrations' done
	// signals depend on that. nil in tests that build a bare listener.
	synced func()
	// logger reports handler panics, as client-go's processorListener
	// does: HandlerOptions.Logger, else klog.Background().
	logger klog.Logger
	// exited is closed once no handler call is running or to come: the
	// listener actor has stopped, or the listener was removed (or the
	// informer stopped) before it was spawned. It is the registration's
	// ShutdownChan.
	exited   chan struct{}
	exitOnce sync.Once
}

func newListener(id indexer.ListenerID, h ContextEventHandler, name string, resync time.Duration, tel *telemetry.T, halted *atomic.Bool) *handlerListener {
	l := &handlerListener{
		halted:    halted,
		id:        id,
		name:      name,
		handler:   h,
		resync:    resync,
		tel:       tel,
		histEvery: DefaultHandlerHistogramEvery,
		logger:    klog.Background(),
		exited:    make(chan struct{}),
	}
	l.counters.Sent = &l.sent
	l.counters.Metrics, l.counters.Attrs = tel.Metrics, tel.Metrics.HandlerAttrs(name)
	l.backlog = tel.Metrics.NewBacklog(name, l.counters.Backlog)
	return l
}

// newCore makes the listener's core, once its options are final (Run, or
// AddEventHandler on a running informer).
func (l *handlerListener) newCore() *listener.Core {
	l.core = listener.NewCore(listener.Config{ID: l.id, Coalesce: l.coalesce, Counters: &l.counters})
	return l.core
}

// newHandler makes the listener's handler call path, whose calls get ctx
// (the informer's, cancelled when it stops).
func (l *handlerListener) newHandler(ctx context.Context) *listener.Handler {
	return listener.NewHandler(listener.HandlerConfig{
		Handler: l.handler, Name: l.name, Context: ctx, Telemetry: l.tel, Counters: &l.counters,
		Logger: &l.logger, HistogramEvery: l.histEvery, Removed: &l.removed, Halted: l.halted,
		Synced: l.tellSynced, Exited: l.exitActor,
	})
}

// exit closes exited; later calls do nothing.
func (l *handlerListener) exit() {
	l.exitOnce.Do(func() { close(l.exited) })
}

// exitActor is told when the listener actor has stopped.
func (l *handlerListener) exitActor() {
	l.tel.Metrics.DropBacklog(l.backlog)
	l.exit()
}

func (l *handlerListener) tellSynced() {
	if l.synced != nil {
		l.synced()
	}
}
