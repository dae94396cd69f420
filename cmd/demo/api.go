package main

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/telemetry"
)

// The page's data: GET /api/snapshot and every event of GET /api/stream.
// Rates are per second over the window that ends at the snapshot (the
// last one to two seconds); counts are since the start.
type snapshot struct {
	Time          string            `json:"time"` // RFC 3339
	UptimeS       float64           `json:"uptime_s"`
	Mode          string            `json:"mode"` // "simulated" or "cluster"
	FaultsEnabled bool              `json:"faults_enabled"`
	Stages        []stageSnapshot   `json:"stages"`
	Edges         []edgeSnapshot    `json:"edges"`
	Informer      informerSnapshot  `json:"informer"`
	Handlers      []handlerSnapshot `json:"handlers"`
	Controller    *controllerSnap   `json:"controller"` // null: no controller
	ClientGo      *clientGoSnapshot `json:"clientgo"`   // null: no --compare
	// Shard is the sharded group (--members 2 or more); null: one informer.
	Shard *shardSnapshot `json:"shard"`
}

// stageSnapshot is one actor of the pipeline: kind reflector, fifo,
// indexer, or listener (named after its handler). Rate is the events the
// stage handed on per second; backlog the events waiting for it: the
// simulated API server's watch queue for the reflector, the delta queue's
// length for the fifo, 0 for the indexer (the queue holds what waits for
// it), the listener's mailbox for a handler.
type stageSnapshot struct {
	Name    string  `json:"name"`
	Kind    string  `json:"kind"`
	Rate    float64 `json:"rate"`
	Backlog int64   `json:"backlog"`
}

// edgeSnapshot is the events per second from one stage to the next.
type edgeSnapshot struct {
	From string  `json:"from"`
	To   string  `json:"to"`
	Rate float64 `json:"rate"`
}

// informerSnapshot is the informer's state; with a sharded group, its
// members' range informers summed: lists and watch restarts then count
// each range informer's first list and watch too.
type informerSnapshot struct {
	Synced        bool   `json:"synced"`
	Lists         int64  `json:"lists"`   // lists and relists, the first one included
	Relists       int64  `json:"relists"` // lists after the first
	WatchRestarts int64  `json:"watch_restarts"`
	WatchErrors   int64  `json:"watch_errors"`
	Dropped       int64  `json:"dropped"`
	CacheSize     int    `json:"cache_size"`
	LastRV        string `json:"last_rv"`
}

// handlerSnapshot is one handler: p50/p99 of the event's age at the call
// (from the informer's transform to the call; objects whose
// resourceVersion ends in 0) and of the handler's own duration, in
// milliseconds over the window, 0 when nothing was measured in it. Fault
// describes the fault injected at run time, "" for none.
type handlerSnapshot struct {
	Name          string  `json:"name"`
	Rate          float64 `json:"rate"`
	Backlog       int64   `json:"backlog"`
	P50ms         float64 `json:"p50_ms"`
	P99ms         float64 `json:"p99_ms"`
	DurationP50ms float64 `json:"duration_p50_ms"`
	DurationP99ms float64 `json:"duration_p99_ms"`
	Delivered     int64   `json:"delivered"`
	Panics        int64   `json:"panics"`
	Fault         string  `json:"fault"`
}

type controllerSnap struct {
	WorkqueueDepth int     `json:"workqueue_depth"`
	ReconcileRate  float64 `json:"reconcile_rate"`
	Reconciles     int64   `json:"reconciles"`
}

// pipeline is what the page and the terminal read: the demo's one
// informer (single), or the members of its sharded group together
// (*fleet). Its methods may be called by multiple goroutines
// simultaneously.
type pipeline interface {
	Stats() actors.Stats
	HasSynced() bool
	LastSyncResourceVersion() string
	// handlerHists returns the event age and duration histograms of the
	// handlers named name and the fault injected into them; false when no
	// handler has that name.
	handlerHists(name string) (age, dur []int64, fault string, ok bool)
	// controllerStats returns the controllers' counters; false when there
	// is no controller (--workers 0).
	controllerStats() (ctlStats, bool)
}

// single is the demo's one informer with its handlers and controller.
type single struct {
	*actors.SharedIndexInformer
	handlers []*demoHandler
	ctl      *controller // nil: none
}

func (s single) handlerHists(name string) (age, dur []int64, fault string, ok bool) {
	for _, h := range s.handlers {
		if h.label == name {
			return h.age.counts(), h.dur.counts(), h.fault.String(), true
		}
	}
	return nil, nil, "", false
}

func (s single) controllerStats() (ctlStats, bool) {
	if s.ctl == nil {
		return ctlStats{}, false
	}
	return s.ctl.stats(), true
}

// sample is the cumulative counters at one time.
type sample struct {
	at         time.Time
	stats      actors.Stats
	reconciles int64
	age, dur   map[string][]int64 // by handler
	// members are the sharded group's members' counters, by name.
	members map[string]memberSample
}

// snapshotter makes snapshots. Its methods may be called by multiple
// goroutines simultaneously.
type snapshotter struct {
	p     pipeline
	fleet *fleet        // nil: one informer
	sim   *simCluster   // nil: a real cluster
	side  *clientGoSide // nil: no --compare
	start time.Time

	mu           sync.Mutex
	base, latest sample // the window: base..now, renewed every second
}

func newSnapshotter(p pipeline, fl *fleet, sim *simCluster, side *clientGoSide, start time.Time) *snapshotter {
	s := &snapshotter{p: p, fleet: fl, sim: sim, side: side, start: start}
	s.base = s.sample(start)
	s.latest = s.base
	return s
}

func (s *snapshotter) sample(now time.Time) sample {
	smp := sample{at: now, age: map[string][]int64{}, dur: map[string][]int64{}}
	smp.stats = s.p.Stats()
	for _, h := range smp.stats.Handlers {
		if age, dur, _, ok := s.p.handlerHists(h.Name); ok {
			smp.age[h.Name], smp.dur[h.Name] = age, dur
		}
	}
	if c, ok := s.p.controllerStats(); ok {
		smp.reconciles = c.reconciles
	}
	if s.fleet != nil {
		smp.members = s.fleet.sample()
	}
	return smp
}

// snapshot describes the demo now, over the window since the first sample
// at least a second old.
func (s *snapshotter) snapshot(now time.Time) snapshot {
	s.mu.Lock()
	cur := s.sample(now)
	if now.Sub(s.latest.at) >= time.Second {
		s.base, s.latest = s.latest, cur
	}
	prev := s.base
	s.mu.Unlock()
	return s.describe(prev, cur)
}

func (s *snapshotter) describe(prev, cur sample) snapshot {
	dt := cur.at.Sub(prev.at).Seconds()
	rate := func(c, p int64) float64 {
		if dt <= 0 {
			return 0
		}
		return max(float64(c-p)/dt, 0)
	}
	ms := func(c, p []int64, q float64) float64 {
		d, _ := latencyQuantile(c, p, q)
		return float64(d) / float64(time.Millisecond)
	}
	st, pst := cur.stats, prev.stats
	out := snapshot{
		Time:          cur.at.UTC().Format(time.RFC3339),
		UptimeS:       cur.at.Sub(s.start).Seconds(),
		Mode:          "cluster",
		FaultsEnabled: s.sim != nil,
		Informer: informerSnapshot{
			Synced:        s.p.HasSynced(),
			Lists:         st.Relists,
			Relists:       max(st.Relists-1, 0),
			WatchRestarts: st.WatchRestarts,
			WatchErrors:   st.WatchErrors,
			Dropped:       st.Dropped,
			CacheSize:     st.CacheSize,
			LastRV:        s.p.LastSyncResourceVersion(),
		},
		Handlers: []handlerSnapshot{},
	}
	var watchBacklog int64
	if s.sim != nil {
		out.Mode = "simulated"
		watchBacklog = s.sim.backlog()
	}
	out.Stages = []stageSnapshot{
		{Name: "reflector", Kind: "reflector", Rate: rate(st.ReflectorEvents, pst.ReflectorEvents), Backlog: watchBacklog},
		{Name: "fifo", Kind: "fifo", Rate: rate(st.QueueOut, pst.QueueOut), Backlog: st.QueueBacklog},
		{Name: "indexer", Kind: "indexer", Rate: rate(st.IndexerEvents, pst.IndexerEvents)},
	}
	out.Edges = []edgeSnapshot{
		{From: "reflector", To: "fifo", Rate: rate(st.QueueIn, pst.QueueIn)},
		{From: "fifo", To: "indexer", Rate: rate(st.QueueOut, pst.QueueOut)},
	}
	prevByName := map[string]actors.HandlerStats{}
	for _, h := range pst.Handlers {
		prevByName[h.Name] = h
	}
	for _, h := range st.Handlers {
		p := prevByName[h.Name]
		out.Stages = append(out.Stages, stageSnapshot{Name: h.Name, Kind: "listener", Rate: rate(h.Delivered, p.Delivered), Backlog: h.Backlog})
		// What the indexer sent the listener: delivered, or still waiting.
		out.Edges = append(out.Edges, edgeSnapshot{From: "indexer", To: h.Name, Rate: rate(h.Delivered+h.Backlog, p.Delivered+p.Backlog)})
		hs := handlerSnapshot{
			Name: h.Name, Rate: rate(h.Delivered, p.Delivered), Backlog: h.Backlog,
			Delivered: h.Delivered, Panics: h.Panics,
		}
		if _, _, fault, ok := s.p.handlerHists(h.Name); ok {
			hs.P50ms = ms(cur.age[h.Name], prev.age[h.Name], 0.5)
			hs.P99ms = ms(cur.age[h.Name], prev.age[h.Name], 0.99)
			hs.DurationP50ms = ms(cur.dur[h.Name], prev.dur[h.Name], 0.5)
			hs.DurationP99ms = ms(cur.dur[h.Name], prev.dur[h.Name], 0.99)
			hs.Fault = fault
		}
		out.Handlers = append(out.Handlers, hs)
	}
	if c, ok := s.p.controllerStats(); ok {
		out.Controller = &controllerSnap{
			WorkqueueDepth: c.depth,
			ReconcileRate:  rate(cur.reconciles, prev.reconciles),
			Reconciles:     cur.reconciles,
		}
	}
	if s.side != nil {
		cg := s.side.Snapshot().ClientGo
		out.ClientGo = &cg
	}
	if s.fleet != nil {
		out.Shard = s.fleet.describe(prev, cur, s.start)
	}
	return out
}

// Key watching: GET /api/key?key=ns/name.
const (
	keyWatchFor   = 5 * time.Minute // how long one request watches a key
	maxKeyDeltas  = 200             // deltas remembered per key
	maxWatchedKey = 32              // keys watched at once
	maxKeyTraces  = 20              // traces returned with a key
	maxKeyLength  = 512
)

// keyWatch is the keys the page watches: their deltas are traced whatever
// the sampling ratio (sampler, which the informer's delta sampler asks),
// and the span ring records them here. A key is watched for keyWatchFor
// after it was last asked for. Its methods may be called by multiple
// goroutines simultaneously.
type keyWatch struct {
	sampler *actors.KeySampler

	mu     sync.Mutex
	keys   map[string]*watchedKey
	closed bool
}

type watchedKey struct {
	until  time.Time
	timer  *time.Timer
	deltas []keyDelta // oldest first, at most maxKeyDeltas
}

// keyDelta is one delta of a watched key, from its reflector.receive span.
type keyDelta struct {
	Time    string `json:"time"` // RFC 3339 with nanoseconds
	Type    string `json:"type"`
	RV      string `json:"rv"`
	TraceID string `json:"trace_id"`
}

func newKeyWatch() *keyWatch {
	return &keyWatch{sampler: actors.SampleKeys(), keys: map[string]*watchedKey{}}
}

// errTooManyKeys is returned by watch when maxWatchedKey keys are watched.
var errTooManyKeys = fmt.Errorf("at most %d keys can be watched at once", maxWatchedKey)

// watch starts watching key, or extends its watch, until now+keyWatchFor,
// and returns the deltas recorded so far.
func (k *keyWatch) watch(key string, now time.Time) (time.Time, []keyDelta, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return time.Time{}, nil, errors.New("the demo is stopping")
	}
	w := k.keys[key]
	if w == nil {
		if len(k.keys) >= maxWatchedKey {
			return time.Time{}, nil, errTooManyKeys
		}
		w = &watchedKey{}
		k.keys[key] = w
		k.sampler.Add(key)
		w.timer = time.AfterFunc(keyWatchFor, func() { k.expire(key) })
	} else {
		w.timer.Reset(keyWatchFor)
	}
	w.until = now.Add(keyWatchFor)
	return w.until, append([]keyDelta{}, w.deltas...), nil
}

// expire stops watching key if its time is up (it may have been extended).
func (k *keyWatch) expire(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	w := k.keys[key]
	if w == nil {
		return
	}
	if left := time.Until(w.until); left > 0 {
		w.timer.Reset(left)
		return
	}
	k.unwatchLocked(key)
}

// unwatch stops watching key; it reports whether it was watched.
func (k *keyWatch) unwatch(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.unwatchLocked(key)
}

func (k *keyWatch) unwatchLocked(key string) bool {
	w := k.keys[key]
	if w == nil {
		return false
	}
	w.timer.Stop()
	delete(k.keys, key)
	k.sampler.Remove(key)
	return true
}

// close stops every watch and its timer.
func (k *keyWatch) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	for key := range k.keys {
		k.unwatchLocked(key)
	}
}

// record notes a delta's root span if its key is watched.
func (k *keyWatch) record(s sdktrace.ReadOnlySpan) {
	key := spanKey(s)
	if key == "" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	w := k.keys[key]
	if w == nil {
		return
	}
	d := keyDelta{Time: s.StartTime().UTC().Format(time.RFC3339Nano), TraceID: s.SpanContext().TraceID().String()}
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case telemetry.AttrDeltaType:
			d.Type = kv.Value.AsString()
		case telemetry.AttrResourceVersion:
			d.RV = kv.Value.AsString()
		}
	}
	if len(w.deltas) == maxKeyDeltas {
		w.deltas = slices.Delete(w.deltas, 0, 1)
	}
	w.deltas = append(w.deltas, d)
}

// validKey checks an object key: "namespace/name" or "name".
func validKey(key string) error {
	if key == "" {
		return errors.New("missing key: ?key=namespace/name")
	}
	if len(key) > maxKeyLength {
		return fmt.Errorf("key longer than %d bytes", maxKeyLength)
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil || name == "" || (strings.Contains(key, "/") && ns == "") {
		return fmt.Errorf("key %q is not namespace/name or name", key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return errors.New("key has a control character")
		}
	}
	return nil
}

// keyJSON is the answer of GET /api/key.
type keyJSON struct {
	Key      string      `json:"key"`
	Watching bool        `json:"watching"`
	Until    string      `json:"until"`
	Deltas   []keyDelta  `json:"deltas"`
	Traces   []traceJSON `json:"traces"`
	// Shard says, with a sharded group, where the key lives: null with one
	// informer.
	Shard *keyShard `json:"shard"`
}

// keyShard is the range of a key and its members.
type keyShard struct {
	// Range is the key's range, null when the object is nowhere to be
	// found (its UID, which places it, is unknown); Found says where its
	// UID was read: "cache of m2", "simulated cluster".
	Range *int   `json:"range"`
	Found string `json:"found"`
	// Owner is the range's owner as the live members see it; Delivering
	// the members whose handlers get the range now; CachedBy the members
	// whose cache holds the key.
	Owner      string   `json:"owner"`
	Delivering []string `json:"delivering"`
	CachedBy   []string `json:"cached_by"`
	// Handovers are the range's handover spans (shard.acquire on the new
	// owner, shard.release on the old), each a trace, latest first.
	Handovers []traceJSON `json:"handovers"`
}

// maxKeyHandovers bounds the handover spans returned with a key.
const maxKeyHandovers = 12

// keyShardOf finds key's range and members.
func (a *api) keyShardOf(key string) *keyShard {
	f := a.fleet
	ks := &keyShard{Delivering: []string{}, CachedBy: []string{}, Handovers: []traceJSON{}}
	var obj any
	for _, m := range f.all() {
		if m.hasStopped() {
			continue
		}
		if o, ok, _ := m.inf.GetIndexer().GetByKey(key); ok {
			ks.CachedBy = append(ks.CachedBy, m.name)
			if obj == nil {
				obj, ks.Found = o, "cache of "+m.name
			}
		}
	}
	if obj == nil && f.sim != nil {
		if ns, name, err := cache.SplitMetaNamespaceKey(key); err == nil {
			if pod, ok := f.sim.get(ns, name); ok {
				obj, ks.Found = pod, "simulated cluster"
			}
		}
	}
	live := f.live()
	if obj == nil || len(live) == 0 {
		return ks
	}
	r, err := live[0].inf.RangeOf(obj)
	if err != nil {
		return ks
	}
	ks.Range = &r.Index
	ks.Delivering = f.delivering()[r.Index]
	if ks.Delivering == nil {
		ks.Delivering = []string{}
	}
	viewer := live[0]
	for _, m := range live {
		if len(ks.Delivering) > 0 && m.name == ks.Delivering[0] {
			viewer = m
		}
	}
	if st := viewer.inf.Status(); r.Index < len(st.Ranges) {
		ks.Owner = f.nameOf(st.Ranges[r.Index].Owner)
	}
	if a.ring != nil {
		ks.Handovers = a.ring.handoverTraces(r.Index, maxKeyHandovers)
		for i := range ks.Handovers {
			a.decorate(&ks.Handovers[i])
		}
	}
	return ks
}

// decorate names a trace's member.
func (a *api) decorate(t *traceJSON) {
	if a.fleet != nil && t.MemberID != "" {
		t.Member = a.fleet.nameOf(t.MemberID)
	}
}

func (a *api) getKey(w http.ResponseWriter, r *http.Request) {
	if a.keys == nil || a.ring == nil {
		writeError(w, http.StatusNotFound, "tracing is off (OTEL_TRACES_EXPORTER=none): no key can be watched")
		return
	}
	key := r.URL.Query().Get("key")
	if err := validKey(key); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	until, deltas, err := a.keys.watch(key, a.now())
	if errors.Is(err, errTooManyKeys) {
		writeError(w, http.StatusTooManyRequests, err.Error())
		return
	} else if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	out := keyJSON{Key: key, Watching: true, Until: until.UTC().Format(time.RFC3339), Deltas: deltas, Traces: []traceJSON{}}
	seen := map[string]bool{}
	for i := len(deltas) - 1; i >= 0 && len(out.Traces) < maxKeyTraces; i-- {
		id := deltas[i].TraceID
		if seen[id] {
			continue
		}
		seen[id] = true
		if tid, err := trace.TraceIDFromHex(id); err == nil {
			if t, ok := a.ring.get(tid); ok {
				a.decorate(&t)
				out.Traces = append(out.Traces, t)
			}
		}
	}
	if a.fleet != nil {
		out.Shard = a.keyShardOf(key)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) deleteKey(w http.ResponseWriter, r *http.Request) {
	if a.keys == nil {
		writeError(w, http.StatusNotFound, "tracing is off (OTEL_TRACES_EXPORTER=none): no key is watched")
		return
	}
	key := r.URL.Query().Get("key")
	if err := validKey(key); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !a.keys.unwatch(key) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("key %q is not watched", key))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "message": "stopped watching " + key})
}

// Traces: GET /api/traces?view=recent|slowest&limit=N and /api/trace?id=HEX.
const (
	defaultTraceLimit = 20
	maxTraceLimit     = 200
)

func (a *api) getTraces(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	view := q.Get("view")
	switch view {
	case "":
		view = "recent"
	case "recent", "slowest":
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("view %q: recent or slowest", view))
		return
	}
	limit := defaultTraceLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxTraceLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: a number in 1..%d", s, maxTraceLimit))
			return
		}
		limit = n
	}
	traces := []traceJSON{}
	if a.ring != nil {
		traces = a.ring.list(view, limit)
	}
	for i := range traces {
		a.decorate(&traces[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"traces": traces})
}

func (a *api) getTrace(w http.ResponseWriter, r *http.Request) {
	s := r.URL.Query().Get("id")
	id, err := trace.TraceIDFromHex(s)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("id %q: a trace ID, 32 hex digits", s))
		return
	}
	if a.ring == nil {
		writeError(w, http.StatusNotFound, "tracing is off (OTEL_TRACES_EXPORTER=none)")
		return
	}
	t, ok := a.ring.get(id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("trace %s is not (or no longer) in the last %d spans", s, ringSpans))
		return
	}
	a.decorate(&t)
	writeJSON(w, http.StatusOK, t)
}
