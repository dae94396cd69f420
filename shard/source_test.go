package shard_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// memServer is a small API server for ConfigMaps: a store with resource
// versions, lists, and watches from a resource version (its whole history
// is kept). With filter, it applies shard selectors as a server with the
// ShardedListAndWatch feature does; with rejectSelectors it refuses them as
// a server that validates and rejects the field.
type memServer struct {
	mu       sync.Mutex
	rv       int64
	objs     map[string]*corev1.ConfigMap
	history  []watch.Event // every change, in order; objects carry their RV
	watchers map[*memWatch]struct{}
	uid      int

	filter          bool
	rejectSelectors bool
	// spaces is how many namespaces its objects are spread over (ns0,
	// ns1 and ns2 when 0).
	spaces int
	// watchList: it streams lists (WatchList: initial events, then the
	// initial-events-end bookmark), as kube-apiserver does.
	watchList bool
	// listDelay, when set, delays every list (a slow API server).
	listDelay atomic.Int64
	// lists counts the lists served.
	lists atomic.Int64
	// compacted: a watch from a resourceVersion below it is refused with
	// 410 Gone, as after an etcd compaction.
	compacted atomic.Int64
	// sent counts the objects sent in lists and watch events.
	sent int64
	// stopGate, when set, is given to the watches opened from then on:
	// their Stop waits until it is closed (a watch whose end is slow).
	// stopsWaiting counts the Stops waiting on a gate.
	stopGate     chan struct{}
	stopsWaiting atomic.Int64
	// onList, when set, is told of each list served (with s.mu held).
	onList func(selector string, n int)
}

// compact makes every resourceVersion so far too old to watch from, as an
// etcd compaction does (the revisions jump past it).
func (s *memServer) compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv += 1000
	s.compacted.Store(s.rv)
}

func newMemServer() *memServer {
	return &memServer{objs: map[string]*corev1.ConfigMap{}, watchers: map[*memWatch]struct{}{}}
}

func (s *memServer) change(t watch.EventType, cm *corev1.ConfigMap) {
	s.rv++
	cm.ResourceVersion = strconv.FormatInt(s.rv, 10)
	e := watch.Event{Type: t, Object: cm}
	s.history = append(s.history, e)
	for w := range s.watchers {
		w.push(e)
	}
}

func (s *memServer) create(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uid++
	s.createLocked(name, types.UID(fmt.Sprintf("uid-%d-%s", s.uid, name)))
}

// createWithUID creates an object with the given UID.
func (s *memServer) createWithUID(name string, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uid++
	s.createLocked(name, uid)
}

func (s *memServer) createLocked(name string, uid types.UID) {
	ns := "ns" + strconv.Itoa(s.uid%3)
	if s.spaces > 0 {
		// The number before the end: the hash's top bits hardly depend
		// on a name's last characters, so ns0, ns1... would fall in few
		// ranges.
		ns = fmt.Sprintf("team-%d-ns", s.uid%s.spaces)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid}, Data: map[string]string{"v": "0"}}
	s.objs[cm.Namespace+"/"+name] = cm
	s.change(watch.Added, cm)
}

// update changes the object of key; it returns false when there is none.
func (s *memServer) update(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.objs[key]
	if !ok {
		return false
	}
	cm := old.DeepCopy()
	n, _ := strconv.Atoi(cm.Data["v"])
	cm.Data = map[string]string{"v": strconv.Itoa(n + 1)}
	s.objs[key] = cm
	s.change(watch.Modified, cm)
	return true
}

func (s *memServer) remove(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.objs[key]
	if !ok {
		return false
	}
	delete(s.objs, key)
	cm := old.DeepCopy()
	s.change(watch.Deleted, cm)
	return true
}

func (s *memServer) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.objs))
	for k := range s.objs {
		out = append(out, k)
	}
	return out
}

// snapshot is key → resource version.
func (s *memServer) snapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, o := range s.objs {
		out[k] = o.ResourceVersion
	}
	return out
}

func (s *memServer) selector(opts metav1.ListOptions) (func(runtime.Object) bool, error) {
	if opts.ShardSelector == "" || (!s.filter && !s.rejectSelectors) {
		return func(runtime.Object) bool { return true }, nil
	}
	if s.rejectSelectors {
		return nil, apierrors.NewBadRequest("unknown query parameter shardSelector")
	}
	sel, err := parseSelector(opts.ShardSelector)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return func(o runtime.Object) bool { ok, _ := sel.Matches(o); return ok }, nil
}

func (s *memServer) List(opts metav1.ListOptions) (runtime.Object, error) {
	s.lists.Add(1)
	if d := s.listDelay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	in, err := s.selector(opts)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(s.rv, 10)}}
	if s.filter && opts.ShardSelector != "" {
		// As kube-apiserver 1.37 with the feature: the selector it applied.
		list.ShardInfo = &metav1.ShardInfo{Selector: opts.ShardSelector}
	}
	for _, o := range s.objs {
		if in(o) {
			list.Items = append(list.Items, *o)
		}
	}
	s.sent += int64(len(list.Items))
	if s.onList != nil {
		s.onList(opts.ShardSelector, len(list.Items))
	}
	return list, nil
}

func (s *memServer) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	in, err := s.selector(opts)
	if err != nil {
		return nil, err
	}
	from, _ := strconv.ParseInt(opts.ResourceVersion, 10, 64)
	if from > 0 && from < s.compacted.Load() {
		return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, s.compacted.Load()))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &memWatch{s: s, in: in, ch: make(chan watch.Event, 64), wake: make(chan struct{}, 1), done: make(chan struct{}), stopGate: s.stopGate}
	if s.watchList && opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		for _, o := range s.objs {
			w.push(watch.Event{Type: watch.Added, Object: o})
		}
		w.pushBookmark(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatInt(s.rv, 10),
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
		from = s.rv
	}
	for _, e := range s.history {
		if rv, _ := strconv.ParseInt(e.Object.(*corev1.ConfigMap).ResourceVersion, 10, 64); rv > from {
			w.push(e)
		}
	}
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds <= 1 {
		// A short watch (a replay's) ends at its deadline, as
		// kube-apiserver ends it; longer ones (the informers') outlive
		// the tests.
		time.AfterFunc(time.Duration(*opts.TimeoutSeconds)*time.Second, w.Stop)
	}
	s.watchers[w] = struct{}{}
	go w.run()
	return w, nil
}

// IsWatchListSemanticsUnSupported: lists, then watches, unless watchList.
func (s *memServer) IsWatchListSemanticsUnSupported() bool { return !s.watchList }

// memWatch buffers without bound, so the server never blocks on a watcher.
type memWatch struct {
	s       *memServer
	in      func(runtime.Object) bool
	mu      sync.Mutex
	pending []watch.Event
	ch      chan watch.Event
	wake    chan struct{}
	done    chan struct{}
	once    sync.Once
	// stopGate: Stop waits until it is closed (memServer.stopGate).
	stopGate chan struct{}
}

func (w *memWatch) push(e watch.Event) { // with s.mu held
	if !w.in(e.Object) {
		return
	}
	w.s.sent++
	w.mu.Lock()
	w.pending = append(w.pending, e)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// pushBookmark queues a bookmark, which no selector filters.
func (w *memWatch) pushBookmark(obj runtime.Object) { // with s.mu held
	w.mu.Lock()
	w.pending = append(w.pending, watch.Event{Type: watch.Bookmark, Object: obj})
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *memWatch) run() {
	defer close(w.ch)
	for {
		w.mu.Lock()
		batch := w.pending
		w.pending = nil
		w.mu.Unlock()
		for _, e := range batch {
			select {
			case w.ch <- e:
			case <-w.done:
				return
			}
		}
		select {
		case <-w.wake:
		case <-w.done:
			return
		}
	}
}

func (w *memWatch) Stop() {
	if w.stopGate != nil {
		w.s.stopsWaiting.Add(1)
		<-w.stopGate
		w.s.stopsWaiting.Add(-1)
	}
	w.once.Do(func() {
		w.s.mu.Lock()
		delete(w.s.watchers, w)
		w.s.mu.Unlock()
		close(w.done)
	})
}

func (w *memWatch) ResultChan() <-chan watch.Event { return w.ch }

// parseSelector parses what sharding.Selector.String writes:
// shardRange(field, 'start', 'end') terms joined by " || ".
func parseSelector(s string) (sharding.Selector, error) {
	var reqs []sharding.ShardRangeRequirement
	for _, term := range strings.Split(s, " || ") {
		body, ok := strings.CutPrefix(term, "shardRange(")
		body, ok2 := strings.CutSuffix(body, ")")
		parts := strings.Split(body, ", ")
		if !ok || !ok2 || len(parts) != 3 {
			return nil, fmt.Errorf("bad shard selector term %q", term)
		}
		reqs = append(reqs, sharding.ShardRangeRequirement{Key: parts[0], Start: strings.Trim(parts[1], "'"), End: strings.Trim(parts[2], "'")})
	}
	return sharding.NewSelector(reqs...), nil
}
