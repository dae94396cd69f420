package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/klog/v2"
)

// FilterMode says where a sharded informer's objects are filtered.
type FilterMode int32

const (
	// FilterPending: no list has answered yet.
	FilterPending FilterMode = iota
	// FilterServer: the API server applies the shard selectors (Kubernetes
	// 1.37+ with the ShardedListAndWatch feature gate): each member
	// receives only its ranges' objects. The member still checks them.
	FilterServer
	// FilterClient: the API server ignores or rejects the shard selectors
	// (no gate, an older server, client-go's fake clientset), so every
	// member receives every object and keeps its ranges' own.
	FilterClient
)

func (m FilterMode) String() string {
	switch m {
	case FilterServer:
		return "server"
	case FilterClient:
		return "client"
	}
	return "pending"
}

// MarshalText encodes the mode as its name (server, client, pending), so
// that a Status encodes it as text in JSON.
func (m FilterMode) MarshalText() ([]byte, error) {
	if m < FilterPending || m > FilterClient {
		return nil, fmt.Errorf("shard: unknown filter mode %d", int32(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText decodes a mode's name.
func (m *FilterMode) UnmarshalText(b []byte) error {
	for mode := FilterPending; mode <= FilterClient; mode++ {
		if string(b) == mode.String() {
			*m = mode
			return nil
		}
	}
	return fmt.Errorf("shard: unknown filter mode %q; want server, client or pending", b)
}

// filter is what a member's range informers share about filtering: the
// mode in effect, whether the server rejects selectors, and counts.
type filter struct {
	field  HashField
	mode   atomic.Int32
	reject atomic.Bool // the server refused shardSelector: send none
	// dropped counts objects received that belong to no range of the
	// informer that received them.
	dropped atomic.Int64
	log     *slog.Logger
	once    sync.Once // the "client" log line
	server  sync.Once // the "server" log line
	// probing serialises the range informers' probes (see rangeLW.probe).
	probing sync.Mutex
	// causes get the range informers' list and watch failures (nil: none).
	causes *causes
}

// noteRequest records the outcome of a range's list or watch request: a
// failure, or a success that clears the last failure. A request cancelled
// because its range informer stopped is neither.
func (f *filter) noteRequest(ctx context.Context, err error) {
	if f.causes != nil && ctx.Err() == nil {
		f.causes.noteList(err)
	}
}

func (f *filter) Mode() FilterMode { return FilterMode(f.mode.Load()) }

// toClient records that the server does not filter.
func (f *filter) toClient(why string) {
	f.mode.Store(int32(FilterClient))
	f.once.Do(func() {
		f.log.Info("shard selectors are not applied by the API server; filtering on the client", "reason", why, "mode", FilterClient.String())
	})
}

// rejects records that the server refused the shard selector: the mode
// turns client (logged with why) before the selectors stop, so that a
// range informer listing without one, and finding others' objects, cannot
// log its own reason first.
func (f *filter) rejects(why string) {
	f.toClient(why)
	f.reject.Store(true)
}

// listed records a list (or a watch event) that sent nothing out of range.
func (f *filter) listed() {
	if f.mode.CompareAndSwap(int32(FilterPending), int32(FilterServer)) {
		f.server.Do(func() {
			f.log.Info("the API server applies shard selectors", "mode", FilterServer.String())
		})
	}
}

// rangeLW lists and watches one range: with the range's shard selector, so
// that a server with the feature filters, and filtering on the client too.
// Its intake can be paused: the range's informer then gets nothing more
// from the API server, so that what it has can be drained to the handlers
// (a release) or given to them whole (an activation).
type rangeLW struct {
	inner    cache.ListerWatcher
	rng      Range
	selector sharding.Selector
	query    string
	f        *filter

	mu sync.Mutex
	// paused: events wait (and lists fail) until resumed is closed.
	paused  bool
	resumed chan struct{}
	// seed, when set, makes the first list a warm start's copy (see
	// warm.go); warm is when the copy was used.
	seed func(context.Context) (copied, error)
	warm time.Time
	// seeded are the copy's objects, which the transform leaves as they
	// are (they were transformed where they come from). seedMu guards it,
	// not mu: the transform runs in the range informer's pass, which may
	// run on the goroutine that reads the watch (shell.Direct), and mu is
	// held by forward while it waits for that goroutine to take an event.
	seedMu sync.Mutex
	seeded map[runtime.Object]struct{}
	// fellBack is told why a warm start lists after all.
	fellBack func(why string)
	// forwarded is the newest resourceVersion handed to the informer (a
	// list's, an event object's, a bookmark's): the cache's once it has
	// applied all. object is the newest of an object's (list items and
	// events): the newest version its handlers can have been given.
	forwarded, object int64
	// live is closed once a watch has handed on its first event or
	// bookmark (see isLive).
	live     chan struct{}
	liveOnce sync.Once
	// onLive, when set, is called once a watch has handed on its first
	// event or bookmark.
	onLive func()
	// deleted, while recording (a range until its activation, which
	// resumes from a position): the objects its deletes were about, by key, in
	// their last state, or nil once re-added (see position.go).
	recording bool
	deleted   map[string]runtime.Object
	// held, while recording: the objects handed on, by key, as last
	// handed on; a list that no longer has one of them (a relist: the
	// watch broke and could not resume) records it as deleted.
	held map[string]runtime.Object
}

// record starts recording the deletes the intake takes.
func (lw *rangeLW) record() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.recording, lw.deleted, lw.held = true, map[string]runtime.Object{}, map[string]runtime.Object{}
}

// takeDeleted stops the recording and returns what it recorded (nil if
// none ran). The intake is paused (activation), so nothing is taken
// meanwhile.
func (lw *rangeLW) takeDeleted() map[string]runtime.Object {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	d := lw.deleted
	lw.recording, lw.deleted, lw.held = false, nil, nil
	return stillGone(d)
}

// errPaused fails the lists of a paused range.
var errPaused = errors.New("shard: the range's intake is paused")

// pause stops the intake; once it returns nothing more reaches the
// informer, and forwarded and object are final until resume.
func (lw *rangeLW) pause() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if !lw.paused {
		lw.paused = true
		lw.resumed = make(chan struct{})
	}
}

func (lw *rangeLW) resume() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.paused {
		lw.paused = false
		close(lw.resumed)
	}
}

// versions returns forwarded and object.
func (lw *rangeLW) versions() (forwarded, object int64) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.forwarded, lw.object
}

// note records versions handed on; lw.mu is held.
func (lw *rangeLW) note(rv string, isObject bool) {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		return
	}
	lw.forwarded = max(lw.forwarded, n)
	if isObject {
		lw.object = max(lw.object, n)
	}
}

func newRangeLW(inner cache.ListerWatcher, r Range, f *filter) *rangeLW {
	sel := sharding.NewSelector(r.Requirement(f.field))
	return &rangeLW{inner: inner, rng: r, selector: sel, query: sel.String(), f: f, live: make(chan struct{})}
}

// isLive reports whether a watch of the range has handed on an event or a
// bookmark (the core waits for it before it asks for the range: see
// handover's synced).
func (lw *rangeLW) isLive() bool { return closed(lw.live) }

// closed reports whether ch is closed (no value is ever sent on it).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// markLive records that a watch of the range has handed on something.
func (lw *rangeLW) markLive() {
	lw.liveOnce.Do(func() {
		close(lw.live)
		if lw.onLive != nil {
			lw.onLive()
		}
	})
}

func (lw *rangeLW) options(opts metav1.ListOptions) metav1.ListOptions {
	if !lw.f.reject.Load() {
		opts.ShardSelector = lw.query
	}
	return opts
}

// rejected reports whether err is the server refusing the shard selector,
// and records it (rejects): the range informers send none from now on.
func (lw *rangeLW) rejected(err error) bool {
	if err == nil || lw.f.reject.Load() || !apierrors.IsBadRequest(err) || !strings.Contains(strings.ToLower(err.Error()), "shardselector") {
		return false
	}
	lw.f.rejects("the API server rejects shardSelector: " + err.Error())
	return true
}

func (lw *rangeLW) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

func (lw *rangeLW) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	ctx = quietOnCancel(ctx)
	if list, ok := lw.seedList(ctx); ok {
		return list, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err // the range's informer stopped: no list
	}
	list, err := cache.ToListerWithContext(lw.inner).ListWithContext(ctx, lw.options(opts))
	if lw.rejected(err) {
		list, err = cache.ToListerWithContext(lw.inner).ListWithContext(ctx, lw.options(opts))
	}
	lw.f.noteRequest(ctx, err)
	if err != nil {
		return nil, err
	}
	if err := lw.keepRange(list); err != nil {
		return nil, err
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.paused {
		return nil, errPaused
	}
	_ = meta.EachListItem(list, func(it runtime.Object) error {
		lw.note(versionOf(it), true)
		return nil
	})
	lw.relisted(list)
	if lm, err := meta.ListAccessor(list); err == nil {
		lw.note(lm.GetResourceVersion(), false)
	}
	return list, nil
}

// keepRange drops from list the objects of other ranges, and judges
// whether the server applied the selector. The objects are checked in
// place: a server that applied the selector sent only the range's, and the
// list goes on as it came, without copying its items. Only a list with
// others is rebuilt.
func (lw *rangeLW) keepRange(list runtime.Object) error {
	n, out := 0, 0
	if err := meta.EachListItem(list, func(it runtime.Object) error {
		n++
		if !lw.in(it) {
			out++
		}
		return nil
	}); err != nil {
		return err
	}
	if out > 0 {
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		kept := make([]runtime.Object, 0, len(items)-out)
		for _, it := range items {
			if ok, err := lw.selector.Matches(it); ok || err != nil {
				kept = append(kept, it)
			}
		}
		if err := meta.SetList(list, kept); err != nil {
			return err
		}
	}
	lw.judge(list, n, n-out)
	return nil
}

// relisted records, while recording, the objects handed on before that
// list does not have as deleted (in their last state): a relist's deletes
// reach the informer as the difference, never as events, and the handlers
// of a range taken over must get them. lw.mu is held.
func (lw *rangeLW) relisted(list runtime.Object) {
	if !lw.recording {
		return
	}
	now := make(map[string]runtime.Object, len(lw.held))
	_ = meta.EachListItem(list, func(it runtime.Object) error {
		if k, err := cache.MetaNamespaceKeyFunc(it); err == nil {
			now[k] = it
		}
		return nil
	})
	for k, o := range lw.held {
		if _, ok := now[k]; !ok {
			lw.deleted[k] = impliedDelete{o}
		}
	}
	for k := range now {
		if _, ok := lw.deleted[k]; ok {
			lw.deleted[k] = nil
		}
	}
	lw.held = now
}

// impliedDelete is the last state of an object a relist no longer has:
// its delete's version is not known (it came after that state's).
type impliedDelete struct{ runtime.Object }

// seedList returns a warm start's list, once: the copy's objects at its
// resourceVersion. A list that follows soon after one is a fallback (the
// watch from the copy's version was refused: 410 Gone).
func (lw *rangeLW) seedList(ctx context.Context) (runtime.Object, bool) {
	lw.mu.Lock()
	seed := lw.seed
	lw.seed = nil
	warm := lw.warm
	lw.mu.Unlock()
	if seed == nil {
		if !warm.IsZero() && time.Since(warm) < time.Minute && lw.fellBack != nil {
			lw.mu.Lock()
			lw.warm = time.Time{}
			lw.mu.Unlock()
			lw.fellBack("the watch from the copy's resourceVersion failed (410 Gone, or another error): listing")
		}
		return nil, false
	}
	cp, err := seed(ctx)
	objs, rv := cp.objs, cp.rv
	if err != nil {
		if ctx.Err() != nil {
			return nil, false // stopped while it copied: neither a start nor a fallback
		}
		if lw.fellBack != nil {
			lw.fellBack("no copy of the range: " + err.Error())
		}
		return nil, false
	}
	kept := objs[:0]
	for _, o := range objs {
		if ok, err := lw.selector.Matches(o); err != nil || ok {
			kept = append(kept, o)
		}
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.paused {
		return nil, false
	}
	seeded := make(map[runtime.Object]struct{}, len(kept))
	for _, o := range kept {
		seeded[o] = struct{}{}
		lw.note(versionOf(o), true)
		if k, err := cache.MetaNamespaceKeyFunc(o); err == nil && lw.recording {
			lw.held[k] = o
		}
	}
	lw.seedMu.Lock()
	lw.seeded = seeded
	lw.seedMu.Unlock()
	lw.note(rv, false)
	lw.warm = time.Now()
	lw.f.modeFromCopy(cp.mode)
	return &seedList{ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: kept}, true
}

// modeFromCopy sets a pending filter mode from a warm start's copy: no
// list tells this member whether the server filters, the member the copy
// came from says, if it knows (mode); if not, the watch probes.
func (f *filter) modeFromCopy(mode string) {
	if f.Mode() == FilterPending {
		switch mode {
		case FilterServer.String():
			f.listed()
		case FilterClient.String():
			f.toClient("the member the range's copy came from filters on the client")
		}
	}
}

// transform is the range informer's transform when it starts warm: the
// copy's objects pass as they are, the others through the user's.
func (lw *rangeLW) transform(user cache.TransformFunc) cache.TransformFunc {
	return func(obj any) (any, error) {
		if o, ok := obj.(runtime.Object); ok {
			lw.seedMu.Lock()
			_, seeded := lw.seeded[o]
			delete(lw.seeded, o)
			lw.seedMu.Unlock()
			if seeded {
				return obj, nil
			}
		}
		if user != nil {
			return user(obj)
		}
		return obj, nil
	}
}

// judge sets the filter mode from a list response of n objects, kept of
// them in range: a list that says the server applied the selector
// (shardInfo, empty lists included) is server-side filtering, one that
// does not is client-side.
func (lw *rangeLW) judge(list runtime.Object, n, kept int) {
	switch applied, known := shardInfo(list); {
	case lw.f.reject.Load():
		// Listed without a selector (or with one, before the refusal was
		// known): the mode is client already, for that reason.
	case kept < n:
		lw.f.toClient("a list returned objects outside the requested ranges")
	case known && applied:
		lw.f.listed()
	case known:
		lw.f.toClient("the list response has no shardInfo: the API server ignored the shard selector")
	case n > 0:
		// A list type that cannot say (no list metadata): every object of
		// a non-empty list was in range.
		lw.f.listed()
	}
}

// probe lists one object of the range while the filter mode is pending,
// before a WatchList stream: the stream (client-go v0.37's default) says
// nothing of whether the server applied the selector, and on an empty
// range it sends no object that could tell; a list response's shardInfo
// does. One probe at a time for the member's range informers: once one
// has answered, the others find the mode known. An error leaves the mode
// pending (the stream's objects, or the next watch's probe, tell).
func (lw *rangeLW) probe(ctx context.Context) {
	lw.f.probing.Lock()
	defer lw.f.probing.Unlock()
	if lw.f.Mode() != FilterPending || lw.f.reject.Load() {
		return
	}
	ctx = quietOnCancel(ctx)
	list, err := cache.ToListerWithContext(lw.inner).ListWithContext(ctx, lw.options(metav1.ListOptions{Limit: 1}))
	if err != nil {
		lw.rejected(err) // recorded if it is a refusal of the selector
		return
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return
	}
	kept := 0
	for _, it := range items {
		if ok, err := lw.selector.Matches(it); ok || err != nil {
			kept++
		}
	}
	lw.judge(list, len(items), kept)
}

func (lw *rangeLW) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

func (lw *rangeLW) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if lw.f.Mode() == FilterPending && (opts.SendInitialEvents != nil && *opts.SendInitialEvents || lw.warmStarted()) {
		lw.probe(ctx)
	}
	w, err := cache.ToWatcherWithContext(lw.inner).WatchWithContext(ctx, lw.options(opts))
	if lw.rejected(err) {
		w, err = cache.ToWatcherWithContext(lw.inner).WatchWithContext(ctx, lw.options(opts))
	}
	lw.f.noteRequest(ctx, err)
	if err != nil {
		return nil, err
	}
	return newFilteredWatch(w, lw, func(e watch.Event) bool {
		switch e.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			if !lw.in(e.Object) {
				lw.f.toClient("a watch sent an object outside the requested ranges")
				return false
			}
			if lw.f.Mode() == FilterPending {
				lw.f.listed() // a WatchList stream is the list
			}
		}
		return true
	}), nil
}

// filteredWatch passes on the events keep keeps. Unlike apimachinery's
// watch.Filter, its goroutine ends on Stop even when nobody reads its
// events any more.
type filteredWatch struct {
	in   watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func newFilteredWatch(in watch.Interface, lw *rangeLW, keep func(watch.Event) bool) watch.Interface {
	w := &filteredWatch{in: in, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.out)
		for {
			select {
			case e, ok := <-in.ResultChan():
				if !ok {
					return
				}
				if !keep(e) {
					continue
				}
				if !w.forward(lw, e) {
					return
				}
			case <-w.stop:
				return
			}
		}
	}()
	return w
}

// forward hands e on, once the range's intake is not paused, noting its
// version; false when the watch stopped meanwhile.
func (w *filteredWatch) forward(lw *rangeLW, e watch.Event) bool {
	lw.mu.Lock()
	for lw.paused {
		ch := lw.resumed
		lw.mu.Unlock()
		select {
		case <-ch:
		case <-w.stop:
			return false
		}
		lw.mu.Lock()
	}
	defer lw.mu.Unlock()
	if e.Object != nil {
		switch e.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			lw.note(versionOf(e.Object), true)
			if lw.recording {
				noteDelete(lw.deleted, lw.held, e)
			}
		case watch.Bookmark:
			lw.note(versionOf(e.Object), false)
		}
	}
	lw.markLive()
	select {
	case w.out <- e:
		return true
	case <-w.stop:
		return false
	}
}

func (w *filteredWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *filteredWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.in.Stop()
	})
}

// in reports whether obj belongs to the range; objects it cannot place (no
// metadata) are passed on, for the informer to report.
func (lw *rangeLW) in(obj runtime.Object) bool {
	ok, err := lw.selector.Matches(obj)
	if err != nil {
		return true
	}
	if !ok {
		lw.f.dropped.Add(1)
	}
	return ok
}

// IsWatchListSemanticsUnSupported passes the wrapped source's answer on
// (client-go's fake clientset cannot stream a WatchList).
func (lw *rangeLW) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(lw.inner)
}

// shardInfo reports whether a list response says the server applied a
// shard selector (ListMeta.ShardInfo, set by a server with the
// ShardedListAndWatch feature, empty lists included), and whether the list
// type can say at all.
func shardInfo(list runtime.Object) (applied, known bool) {
	if u, ok := list.(*unstructured.UnstructuredList); ok {
		_, found, err := unstructured.NestedFieldNoCopy(u.Object, "metadata", "shardInfo")
		return found && err == nil, true
	}
	m, err := meta.ListAccessor(list)
	if err != nil {
		return false, false
	}
	if si, ok := m.(metav1.ShardedListInterface); ok {
		return si.GetShardInfo() != nil, true
	}
	return false, false
}

// quietOnCancel gives ctx a logger (klog's contextual one, which client-go
// logs to) that drops the errors logged once ctx is done: a range's list
// is cancelled when the range moves away while it is read, and client-go
// then logs "Unexpected error when reading response body" at error level
// for what is no error.
func quietOnCancel(ctx context.Context) context.Context {
	sink := klog.FromContext(ctx).GetSink()
	if sink == nil {
		return ctx
	}
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1) // quietSink's own frame
	}
	return klog.NewContext(ctx, logr.New(quietSink{LogSink: sink, ctx: ctx}))
}

// quietSink drops errors once ctx is done.
type quietSink struct {
	logr.LogSink
	ctx context.Context
}

// Init does nothing: the wrapped sink is initialised already, and klog's
// would add the call depth again.
func (s quietSink) Init(logr.RuntimeInfo) {}

func (s quietSink) Error(err error, msg string, kv ...any) {
	if s.ctx.Err() != nil {
		return
	}
	s.LogSink.Error(err, msg, kv...)
}

func (s quietSink) WithValues(kv ...any) logr.LogSink {
	return quietSink{LogSink: s.LogSink.WithValues(kv...), ctx: s.ctx}
}

func (s quietSink) WithName(name string) logr.LogSink {
	return quietSink{LogSink: s.LogSink.WithName(name), ctx: s.ctx}
}

func (s quietSink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		return quietSink{LogSink: cd.WithCallDepth(depth), ctx: s.ctx}
	}
	return s
}

// warmStarted reports whether the range's informer started from a copy.
func (lw *rangeLW) warmStarted() bool {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return !lw.warm.IsZero()
}
