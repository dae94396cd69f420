package sim

import (
	"maps"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/reflector"
)

// namespace is the namespace of every simulated object.
const namespace = "ns"

// server is the scripted API server: pods with resource versions, the
// history of their changes (for watches from a resource version), at most
// one call (list or watch) waiting for an answer, and at most one open watch
// stream, whose events wait there until the simulator flushes them to the
// reflector.
type server struct {
	rv        int64
	objs      map[string]*v1.Pod // by name
	history   []watch.Event
	compacted int64 // watches from an older resource version get 410
	call      any   // *reflector.ListRequest, *reflector.WatchRequest or nil
	stream    *stream
	// noBookmark: a WatchList request is taken as a plain watch (the
	// objects as Added events, no initial-events-end bookmark), as a source
	// without WatchList support (client-go's fake clientset) takes it.
	noBookmark bool
}

type stream struct {
	gen uint64
	// watchList: the stream answers a WatchList request; opened: its
	// WatchOpened report was made.
	watchList, opened bool
	events            []watch.Event
	closed            bool // no event after those queued; then the watch ends
}

func newServer() *server { return &server{rv: 1, objs: map[string]*v1.Pod{}} }

// pod is a new version of name; a created one (no current version) gets
// a new UID ("u" and its first resource version), the others keep it.
func (s *server) pod(name string) *v1.Pod {
	s.rv++
	rv := strconv.FormatInt(s.rv, 10)
	uid := types.UID("u" + rv)
	if cur := s.objs[name]; cur != nil {
		uid = cur.UID
	}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, ResourceVersion: rv, UID: uid}}
}

// mutate applies a create, update or delete of name ("create" of a present
// object updates it; update and delete of an absent one do nothing) and
// reports whether anything changed.
func (s *server) mutate(op, name string) bool {
	_, exists := s.objs[name]
	var ev watch.Event
	switch {
	case op == "delete" && exists:
		p := s.pod(name)
		delete(s.objs, name)
		ev = watch.Event{Type: watch.Deleted, Object: p}
	case op == "create" && !exists:
		p := s.pod(name)
		s.objs[name] = p
		ev = watch.Event{Type: watch.Added, Object: p}
	case (op == "update" || op == "create") && exists:
		p := s.pod(name)
		s.objs[name] = p
		ev = watch.Event{Type: watch.Modified, Object: p}
	default:
		return false
	}
	s.history = append(s.history, ev)
	if s.stream != nil && !s.stream.closed {
		s.stream.events = append(s.stream.events, ev)
	}
	return true
}

// snapshot is the source of truth as key → resource version.
func (s *server) snapshot() map[string]string {
	out := make(map[string]string, len(s.objs))
	for n, p := range s.objs {
		out[namespace+"/"+n] = p.ResourceVersion
	}
	return out
}

func (s *server) rvString() string { return strconv.FormatInt(s.rv, 10) }

func (s *server) sortedPods() []*v1.Pod {
	names := make([]string, 0, len(s.objs))
	for n := range s.objs {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]*v1.Pod, len(names))
	for i, n := range names {
		out[i] = s.objs[n]
	}
	return out
}

func bookmarkPod(rv string, initialEnd bool) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}
	if initialEnd {
		p.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	return p
}

func errEvent(err *apierrors.StatusError) watch.Event {
	st := err.Status()
	return watch.Event{Type: watch.Error, Object: &st}
}

var podsGR = schema.GroupResource{Resource: "pods"}

// callError is the error a failed call returns: code is 500, 410, 429 or
// 403.
func callError(code int) *apierrors.StatusError {
	switch code {
	case 410:
		return apierrors.NewResourceExpired("too old resource version")
	case 429:
		return apierrors.NewTooManyRequests("slow down", 1)
	case 403:
		return apierrors.NewForbidden(podsGR, "", errInjected)
	default:
		return apierrors.NewInternalError(errInjected)
	}
}

type injected struct{}

func (injected) Error() string { return "injected failure" }

var errInjected error = injected{}

// answerOld answers a waiting list as a lagging watch cache may: from the
// state back changes ago, but not older than the list asks for (a
// resource version, or the latest for "") nor than the compaction.
func (s *server) answerOld(back int64) any {
	c, ok := s.call.(*reflector.ListRequest)
	if !ok {
		return nil
	}
	s.call = nil
	at := max(s.rv-back, s.compacted, 1)
	switch rv := c.Options.ResourceVersion; rv {
	case "":
		at = s.rv
	case "0":
	default:
		n, _ := strconv.ParseInt(rv, 10, 64)
		at = max(at, n)
	}
	objs := map[string]*v1.Pod{}
	for _, ev := range s.history {
		p := ev.Object.(*v1.Pod)
		if n, _ := strconv.ParseInt(p.ResourceVersion, 10, 64); n > at {
			break
		}
		if ev.Type == watch.Deleted {
			delete(objs, p.Name)
		} else {
			objs[p.Name] = p
		}
	}
	names := slices.Sorted(maps.Keys(objs))
	l := &v1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(at, 10)}}
	for _, n := range names {
		l.Items = append(l.Items, *objs[n])
	}
	return &reflector.ListDone{Gen: c.Gen, Result: reflector.ListResult{List: l}}
}

// answer answers the waiting call: with an error when code is not 0,
// else with a list or an open watch. It returns the reports for the
// reflector, in order.
func (s *server) answer(code int) []any {
	if r := s.answerOne(code); r != nil {
		return []any{r}
	}
	if st := s.stream; st != nil && st.watchList && !st.opened {
		// The shell reports that a WatchList stream opened, before its
		// events.
		st.opened = true
		return []any{&reflector.WatchOpened{Gen: st.gen}}
	}
	return nil
}

func (s *server) answerOne(code int) any {
	c := s.call
	s.call = nil
	switch c := c.(type) {
	case *reflector.ListRequest:
		if code != 0 {
			return &reflector.ListDone{Gen: c.Gen, Result: reflector.ListResult{Err: callError(code)}}
		}
		l := &v1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: s.rvString()}}
		for _, p := range s.sortedPods() {
			l.Items = append(l.Items, *p)
		}
		return &reflector.ListDone{Gen: c.Gen, Result: reflector.ListResult{List: l}}
	case *reflector.WatchRequest:
		if code != 0 {
			return &reflector.WatchFailed{Gen: c.Gen, Err: callError(code)}
		}
		s.stream = s.open(c)
	}
	return nil
}

// open opens a watch stream as the API server would for c's options: from
// "" or "0", the current objects as Added events first; from a resource
// version, the changes after it (410 if it is compacted); a WatchList
// stream, the current objects then the initial-events-end bookmark.
func (s *server) open(c *reflector.WatchRequest) *stream {
	st := &stream{gen: c.Gen}
	from := int64(-1)
	if rv := c.Options.ResourceVersion; rv != "" && rv != "0" {
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil || n < s.compacted {
			st.events = []watch.Event{errEvent(callError(410))}
			st.closed = true
			return st
		}
		from = n
	}
	st.watchList = c.WatchList
	if c.WatchList || from < 0 {
		for _, p := range s.sortedPods() {
			st.events = append(st.events, watch.Event{Type: watch.Added, Object: p})
		}
		if c.WatchList && !s.noBookmark {
			st.events = append(st.events, watch.Event{Type: watch.Bookmark, Object: bookmarkPod(s.rvString(), true)})
		}
		return st
	}
	for _, ev := range s.history {
		if n, _ := strconv.ParseInt(rvOf(ev.Object), 10, 64); n > from {
			st.events = append(st.events, ev)
		}
	}
	return st
}

// repeat sends the open stream's last change again if it was a delete (a
// duplicate delivery: the queue must collapse it).
func (s *server) repeat() {
	if s.stream == nil || s.stream.closed || len(s.history) == 0 {
		return
	}
	if ev := s.history[len(s.history)-1]; ev.Type == watch.Deleted {
		s.stream.events = append(s.stream.events, ev)
	}
}

// bookmark queues a bookmark at the current resource version on the open
// stream.
func (s *server) bookmark() {
	if s.stream != nil && !s.stream.closed {
		s.stream.events = append(s.stream.events, watch.Event{Type: watch.Bookmark, Object: bookmarkPod(s.rvString(), false)})
	}
}

// rvOf is obj's resource version, looking through a tombstone.
func rvOf(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*v1.Pod); ok {
		return p.ResourceVersion
	}
	return "?"
}

// uidOf is obj's UID, looking through a tombstone.
func uidOf(obj any) types.UID {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*v1.Pod); ok {
		return p.UID
	}
	return "?"
}
