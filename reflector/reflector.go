package reflector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/utils/clock"

	"github.com/actorinformer/actorinformer/telemetry"
)

// client-go's reflector defaults.
const (
	defaultMinWatchTimeout = 5 * time.Minute
	defaultBackoffInit     = 800 * time.Millisecond
	defaultBackoffMax      = 30 * time.Second
	defaultBackoffFactor   = 2.0
	defaultBackoffJitter   = 1.0
	// backoffReset: the backoff goes back to its start once this long has
	// passed since it last did (wait.Backoff.DelayWithReset, as client-go).
	backoffReset = 2 * time.Minute
	// DefaultMaxBatch is the most watch events read into one batch.
	DefaultMaxBatch = 1024
)

// DefaultBackoff is client-go's reflector backoff: 800ms doubling to 30s,
// jitter 1.0.
func DefaultBackoff() wait.Backoff {
	return wait.Backoff{
		Duration: defaultBackoffInit,
		Cap:      defaultBackoffMax,
		Steps:    int(math.Ceil(float64(defaultBackoffMax) / float64(defaultBackoffInit))),
		Factor:   defaultBackoffFactor,
		Jitter:   defaultBackoffJitter,
	}
}

// Config configures a reflector. ListerWatcher is required.
type Config struct {
	// ListerWatcher lists and watches the resource. It should honour its
	// context (ListWithContext/WatchWithContext). Stopping the actor does
	// not wait for a List or Watch call in flight: the call's goroutine
	// ends when it returns, stopping the watcher it returned. A watch being
	// read is stopped (its Stop has returned) before the actor has stopped.
	ListerWatcher cache.ListerWatcher
	// Context is the parent of the context the actor passes to List, Watch
	// and the WatchErrorHandler (an informer passes its run's). Once it is
	// done the actor starts no list, watch or backoff any more, as
	// client-go's reflector; stop the actor to end it. Default:
	// context.Background().
	Context context.Context
	// ExpectedType is an example object: watch events of another Go type
	// (or, for *unstructured.Unstructured with apiVersion and kind set,
	// another GVK) are dropped. Nil accepts any type.
	ExpectedType runtime.Object
	// Queue receives the *fifo.Replace and *fifo.Deltas messages, unless
	// Props is given another PID.
	Queue *actor.PID
	// Name names the reflector in logs; default: the telemetry informer
	// name, else the expected type.
	Name string
	// TypeDescription describes the expected type in logs and errors, as
	// client-go's ReflectorOptions.TypeDescription; default: derived from
	// ExpectedType.
	TypeDescription string
	// Transform is applied to every listed or watched object before it is
	// queued.
	Transform cache.TransformFunc
	// WatchErrorHandler is called when a ListAndWatch iteration fails, as
	// client-go calls its reflector's; default: log at error level.
	WatchErrorHandler cache.WatchErrorHandlerWithContext
	// PageSize is the list page size. 0 means client-go's rule: 500 for
	// RV "" and "0" lists, and unpaginated for lists at a given RV unless
	// the first list came back paginated.
	PageSize int64
	// UseWatchList turns WatchList streaming on or off. Nil means client-go's
	// WatchListClient feature gate. Either way it is off when the
	// ListerWatcher says it does not support WatchList semantics.
	UseWatchList *bool
	// MinWatchTimeout: watch requests time out after a random time in
	// [MinWatchTimeout, 2*MinWatchTimeout]. Values under 5 minutes are
	// raised to 5 minutes, as in client-go.
	MinWatchTimeout time.Duration
	// MaxInternalErrorRetryDuration: how long to re-watch at once after
	// internal (500) watch errors instead of relisting. 0: never.
	MaxInternalErrorRetryDuration time.Duration
	// Backoff overrides DefaultBackoff (tests use a fast one).
	Backoff *wait.Backoff
	// Clock runs backoff timers and measures watch durations; default real.
	Clock clock.WithDelayedExecution
	// MaxBatch caps the watch events in one batch; default DefaultMaxBatch.
	MaxBatch int
	// Telemetry: logging, metrics and tracing; default none.
	Telemetry *telemetry.T
}

// Status is a snapshot of what the reflector has synced.
type Status struct {
	// ResourceVersion is the last synced resource version.
	ResourceVersion string
	// Syncs counts the Replaces sent (initial sync and relists).
	Syncs int64
	// LastSyncUsedWatchList tells whether the last of them came from a
	// WatchList stream rather than a list.
	LastSyncUsedWatchList bool
	// UseWatchList tells whether syncs try WatchList first. It turns false
	// for good when a stream shows that the source does not support
	// WatchList (see WatchListGiveUpAfter).
	UseWatchList bool
	// AwaitingInitialEventsEnd is set while a WatchList stream is open or
	// being opened and has not sent its initial-events-end bookmark: the
	// informer cannot sync before it. AwaitingSince is when that stream
	// was requested (zero when not waiting).
	AwaitingInitialEventsEnd bool
	AwaitingSince            time.Time
}

// Reflector is the handle of one reflector: its settings and what it has
// synced. Props makes the actor that does the work. Its methods may be
// called by multiple goroutines simultaneously. Run at most one reflector
// actor from a handle at a time: they would share the status.
type Reflector struct {
	*settings

	// mu guards status, which the actor stores as its Machine reports it.
	mu     sync.RWMutex
	status Status
}

// settings are a reflector's configuration, resolved once by New and shared
// read-only by its Machines and its actor's shell.
type settings struct {
	cfg          Config
	lw           cache.ListerWatcherWithContext
	name         string
	typeDesc     string
	expectedType reflect.Type
	expectedGVK  *schema.GroupVersionKind
	minTimeout   time.Duration
	maxTimeout   time.Duration
	backoff      wait.Backoff
	clock        clock.WithDelayedExecution
	maxBatch     int
	tel          *telemetry.T
	log          *slog.Logger
	// tracing is set when tracing is on; metered when metrics are: deltas
	// are then stamped with their batch's receive time, and lists timed.
	tracing, metered bool
	// rand draws the watch timeouts (tests fix it).
	rand func() float64
	// cacheRef is never run: it is what handlers written for client-go
	// (which get a *cache.Reflector) are given.
	cacheRef *cache.Reflector
}

// New builds a reflector handle. It panics if cfg.ListerWatcher is nil.
func New(cfg Config) *Reflector {
	if cfg.ListerWatcher == nil {
		panic("reflector: Config.ListerWatcher is nil")
	}
	s := &settings{cfg: cfg, lw: cache.ToListerWatcherWithContext(cfg.ListerWatcher), rand: rand.Float64}
	s.tel = cfg.Telemetry
	if s.tel == nil {
		s.tel = telemetry.Nop()
	}
	s.log = s.tel.Logger
	s.tracing, s.metered = s.tel.Tracing(), s.tel.Metrics.Enabled()
	s.clock = cfg.Clock
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	s.backoff = DefaultBackoff()
	if cfg.Backoff != nil {
		s.backoff = *cfg.Backoff
	}
	s.maxBatch = cfg.MaxBatch
	if s.maxBatch <= 0 {
		s.maxBatch = DefaultMaxBatch
	}
	s.minTimeout = defaultMinWatchTimeout
	if cfg.MinWatchTimeout > defaultMinWatchTimeout {
		s.minTimeout = cfg.MinWatchTimeout
	}
	s.maxTimeout = 2 * s.minTimeout

	var example any // for cacheRef, which cannot take a typed nil
	if cfg.ExpectedType != nil {
		s.expectedType = reflect.TypeOf(cfg.ExpectedType)
		if !isNil(cfg.ExpectedType) {
			example = cfg.ExpectedType
			if u, ok := cfg.ExpectedType.(*unstructured.Unstructured); ok {
				if gvk := u.GroupVersionKind(); !gvk.Empty() {
					s.expectedGVK = &gvk
				}
			}
		}
	}
	s.name = cfg.Name
	if s.name == "" {
		s.name = s.tel.Info.Name
	}
	s.cacheRef = cache.NewReflectorWithOptions(cfg.ListerWatcher, example, nil,
		cache.ReflectorOptions{Name: s.name, TypeDescription: cfg.TypeDescription})
	s.typeDesc = s.cacheRef.TypeDescription()
	if example == nil && s.expectedType != nil && cfg.TypeDescription == "" {
		s.typeDesc = s.expectedType.String()
	}
	if s.name == "" {
		s.name = s.typeDesc
	}

	r := &Reflector{settings: s}
	if cfg.UseWatchList != nil {
		r.status.UseWatchList = *cfg.UseWatchList
	} else {
		r.status.UseWatchList = clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient)
	}
	if r.status.UseWatchList && watchlist.DoesClientNotSupportWatchListSemantics(cfg.ListerWatcher) {
		s.log.Debug("the ListerWatcher does not support WatchList semantics; WatchList is off", "reflector", s.name)
		r.status.UseWatchList = false
	}
	return r
}

// Name is the reflector's name.
func (r *Reflector) Name() string { return r.name }

// TypeDescription describes the expected type, as client-go's reflector.
func (r *Reflector) TypeDescription() string { return r.typeDesc }

// LastSyncResourceVersion is the resource version last seen in a list,
// a watch-list or a watch event (bookmarks included).
func (r *Reflector) LastSyncResourceVersion() string { return r.Status().ResourceVersion }

// LastSyncUsedWatchList tells whether the last initial sync or relist was
// served by a WatchList stream.
func (r *Reflector) LastSyncUsedWatchList() bool { return r.Status().LastSyncUsedWatchList }

// Status returns a snapshot of the reflector's sync state.
func (r *Reflector) Status() Status {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.status
}

// setStatus stores what the Machine reported.
func (r *Reflector) setStatus(st Status) {
	r.mu.Lock()
	r.status = st
	r.mu.Unlock()
}

// handleError is what client-go's Run loop does with a failed ListAndWatch.
//
// The user's handler runs on the reflector actor: a panic in it is logged
// and recovered, so the reflector goes on backing off and retrying.
func (r *Reflector) handleError(ctx context.Context, err error) {
	if h := r.cfg.WatchErrorHandler; h != nil {
		defer func() {
			if p := recover(); p != nil {
				r.tel.Logger.Error("watch error handler panicked", "reflector", r.name, "error", err,
					"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			}
		}()
		h(ctx, r.cacheRef, err)
		return
	}
	r.defaultWatchErrorHandler(err)
}

// defaultWatchErrorHandler is cache.DefaultWatchErrorHandler over slog.
func (r *Reflector) defaultWatchErrorHandler(err error) {
	log := r.tel.Logger
	switch {
	case isExpiredError(err):
		log.Debug("Watch closed", "reflector", r.name, "type", r.typeDesc, "err", err)
	case errors.Is(err, io.EOF):
		// closed normally
	case errors.Is(err, io.ErrUnexpectedEOF):
		log.Info("Watch closed with unexpected EOF", "reflector", r.name, "type", r.typeDesc, "err", err)
	default:
		log.Error("Failed to watch", "reflector", r.name, "type", r.typeDesc, "err", err)
	}
}
