package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
	"github.com/actorinformer/actorinformer/shard/shardtest"
)

// A group of members in one process, each a protoactor cluster member of
// its own (actor system from actors.NewActorSystem, remote on loopback,
// the in-memory test provider), over one source.

func quietSystem() *actor.ActorSystem {
	return actors.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
}

type member struct {
	name   string
	c      *cluster.Cluster
	prov   *test.Provider
	inf    *shard.Informer
	cancel context.CancelFunc
	done   chan struct{}
	view   *view
	// second and secondView are its informer of the group's second kind
	// (group.second), and its handler.
	second     *shard.Informer
	secondView *view
}

type group struct {
	t     testing.TB
	agent *test.InMemAgent
	src   *memServer
	// second, when set, is the source of a second kind, "secrets" (of
	// ConfigMap objects), that every member adds (AddKind).
	second *memServer
	rec    *recorder
	opts   []shard.Option
	name   string
	// leases are the members' leases (testLeases' clientset).
	leases *fake.Clientset
	// transform, when set, is every member's.
	transform cache.TransformFunc
	mu        sync.Mutex
	byName    map[string]*member
	n         int
}

func newGroup(t testing.TB, src *memServer, opts ...shard.Option) *group {
	cs := fake.NewClientset()
	shardtest.InstallLeases(cs)
	return &group{t: t, agent: test.NewInMemAgent(), src: src, rec: &recorder{}, opts: append(leasesOn(cs), opts...), leases: cs, name: "configmaps", byName: map[string]*member{}}
}

// positioned is "" once m's lease carries a position of every range m
// delivers, in each of its kinds: what the members that take its ranges
// over after a crash resume from.
func (g *group) positioned(m *member) string {
	id := m.inf.Member()
	list, err := g.leases.CoordinationV1().Leases("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, l := range list.Items {
		if l.Annotations[shard.AnnotationMember] != id {
			continue
		}
		have := map[string]bool{}
		for _, f := range strings.Split(l.Annotations[shard.AnnotationPositions], ",") {
			key, _, _ := strings.Cut(f, "=")
			if kind, idx, ok := strings.Cut(key, "/"); ok && kind != "" {
				key = "second/" + idx
			}
			have[key] = true
		}
		for _, r := range m.inf.Status().Ranges {
			if r.State != "active" {
				continue
			}
			idx := strconv.Itoa(r.Range.Index)
			if !have[idx] || m.second != nil && !have["second/"+idx] {
				return fmt.Sprintf("%s's lease has no position of range %s: %q", m.name, idx, l.Annotations[shard.AnnotationPositions])
			}
		}
		return ""
	}
	return m.name + " has no lease"
}

func startCluster(agent *test.InMemAgent) (*cluster.Cluster, *test.Provider) {
	prov := test.NewTestProvider(agent, test.WithTestProviderServiceTTL(time.Second), test.WithTestProviderRefreshTTL(200*time.Millisecond))
	cfg := cluster.Configure("shard-test", prov, disthash.New(), remote.Configure("127.0.0.1", 0, shard.RemoteOption()))
	c := cluster.New(quietSystem(), cfg)
	c.StartMember()
	return c, prov
}

// join starts a member and its informer.
func (g *group) join(extra ...shard.Option) *member {
	g.t.Helper()
	return g.joinMany(1, extra...)[0]
}

// joinMany starts n cluster members, then their informers together.
func (g *group) joinMany(n int, extra ...shard.Option) []*member {
	g.t.Helper()
	var out []*member
	for range n {
		c, prov := startCluster(g.agent)
		opts := append([]shard.Option{shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler)))}, g.opts...)
		opts = append(opts, extra...)
		inf, err := shard.New(c, g.name, g.src, &corev1.ConfigMap{}, opts...)
		if err != nil {
			stopCluster(c, prov)
			g.t.Fatalf("shard.New: %v", err)
		}
		g.mu.Lock()
		g.n++
		m := &member{name: fmt.Sprintf("m%d", g.n), c: c, prov: prov, inf: inf, done: make(chan struct{})}
		g.byName[m.name] = m
		g.mu.Unlock()
		if g.transform != nil {
			if err := inf.SetTransform(g.transform); err != nil {
				g.t.Fatal(err)
			}
		}
		m.view = g.rec.handler(m.name, inf)
		if _, err := inf.AddEventHandler(m.view); err != nil {
			g.t.Fatal(err)
		}
		if g.second != nil {
			sec, err := inf.AddKind(schema.GroupResource{Resource: "secrets"}, g.second, &corev1.ConfigMap{})
			if err != nil {
				g.t.Fatalf("AddKind: %v", err)
			}
			m.second, m.secondView = sec, g.rec.handler(m.name, sec)
			m.secondView.kind = "secrets:"
			if _, err := sec.AddEventHandler(m.secondView); err != nil {
				g.t.Fatal(err)
			}
		}
		out = append(out, m)
	}
	for _, m := range out {
		ctx, cancel := context.WithCancel(context.Background())
		m.cancel = cancel
		go func() {
			defer close(m.done)
			m.inf.RunWithContext(ctx)
		}()
	}
	return out
}

// leave stops a member gracefully and waits for it.
func (g *group) leave(m *member) {
	g.t.Helper()
	m.cancel()
	select {
	case <-m.done:
	case <-time.After(60 * time.Second):
		g.t.Fatalf("%s did not leave", m.name)
	}
	g.remove(m)
	stopCluster(m.c, m.prov)
}

// stopCluster stops a member's cluster: the provider first (others see it
// leave), then the rest (Shutdown(true) would sleep 2s).
func stopCluster(c *cluster.Cluster, prov *test.Provider) {
	_ = prov.Shutdown(true)
	c.Shutdown(false)
}

// kill stops a member as a crash would: its informer stops at once and
// says nothing; the provider drops it.
func (g *group) kill(m *member) {
	g.t.Helper()
	m.inf.Abandon()
	<-m.done
	g.remove(m)
	_ = m.prov.Shutdown(false)
	m.c.Shutdown(false)
}

func (g *group) remove(m *member) {
	g.mu.Lock()
	delete(g.byName, m.name)
	g.mu.Unlock()
}

func (g *group) members() []*member {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*member, 0, len(g.byName))
	for _, m := range g.byName {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (g *group) stopAll() {
	for _, m := range g.members() {
		g.leave(m)
	}
}

// settled reports "" once every member is synced, all agree on the view,
// each range is delivered by one member, and the members' caches and
// handler views together equal the server's objects, each once.
func (g *group) settled() string {
	ms := g.members()
	var view []string
	delivered := map[int]string{}
	union := map[string]string{}
	for _, m := range ms {
		st := m.inf.Status()
		if !st.Synced || st.Discovering {
			return m.name + " not synced"
		}
		if view == nil {
			view = st.View
		} else if !slices.Equal(view, st.View) {
			return fmt.Sprintf("views differ: %v and %s's %v", view, m.name, st.View)
		}
		for _, r := range st.Delivered {
			if other, dup := delivered[r.Index]; dup {
				return fmt.Sprintf("range %d delivered by %s and %s", r.Index, other, m.name)
			}
			delivered[r.Index] = m.name
		}
		for _, obj := range m.inf.GetIndexer().List() {
			cm := obj.(*corev1.ConfigMap)
			k := cm.Namespace + "/" + cm.Name
			if _, dup := union[k]; dup {
				return k + " cached twice"
			}
			union[k] = cm.ResourceVersion
		}
		if d := diff(storeSnapshot(m.inf.GetIndexer()), m.view.snapshot()); d != "" {
			return m.name + "'s handler view differs from its cache: " + d
		}
		if m.second == nil {
			continue
		}
		for _, obj := range m.second.GetIndexer().List() {
			cm := obj.(*corev1.ConfigMap)
			k := "secrets:" + cm.Namespace + "/" + cm.Name
			if _, dup := union[k]; dup {
				return k + " cached twice"
			}
			union[k] = cm.ResourceVersion
		}
		if d := diff(prefixed("secrets:", storeSnapshot(m.second.GetIndexer())), m.secondView.snapshot()); d != "" {
			return m.name + "'s handler view of the second kind differs from its cache: " + d
		}
	}
	if len(ms) > 0 && len(delivered) != rangesOf(ms[0].inf) {
		return fmt.Sprintf("%d ranges delivered of %d", len(delivered), rangesOf(ms[0].inf))
	}
	server := g.src.snapshot()
	if g.second != nil {
		for k, v := range prefixed("secrets:", g.second.snapshot()) {
			server[k] = v
		}
	}
	if d := diff(server, union); d != "" {
		return "the members' caches differ from the server: " + d
	}
	return ""
}

// prefixed is m with each key prefixed.
func prefixed(prefix string, m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[prefix+k] = v
	}
	return out
}

func rangesOf(inf *shard.Informer) int {
	st := inf.Status()
	return len(st.Ranges)
}

func storeSnapshot(s cache.Store) map[string]string {
	out := map[string]string{}
	for _, obj := range s.List() {
		cm := obj.(*corev1.ConfigMap)
		out[cm.Namespace+"/"+cm.Name] = cm.ResourceVersion
	}
	return out
}

func diff(want, got map[string]string) string {
	var out []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			out = append(out, "missing "+k)
		} else if g != v {
			out = append(out, fmt.Sprintf("%s at %s, want %s", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			out = append(out, "extra "+k)
		}
	}
	sort.Strings(out)
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	return strings.Join(out, "; ")
}

func eventually(t testing.TB, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: %s", what, last)
}

// recorder keeps every handler call of every member, with a global order,
// to check that no two members call handlers for one range at once.
type recorder struct {
	seq   atomic.Int64
	mu    sync.Mutex
	calls []call
	marks []call // OnAcquire and OnRelease, apart from the object calls
}

func (v *view) mark(op string, r shard.Range) {
	at := v.rec.seq.Add(1)
	v.rec.mu.Lock()
	v.rec.marks = append(v.rec.marks, call{member: v.member, rng: r.Index, start: at, end: at, op: op})
	v.rec.mu.Unlock()
}

type call struct {
	member     string
	rng        int
	start, end int64
	op, key    string
}

// view is one member's handler: the objects it was given (key → resource
// version), minus the ranges it released.
type view struct {
	rec     *recorder
	member  string
	kind    string // prefixes its keys: "" for New's kind
	inf     *shard.Informer
	mu      sync.Mutex
	objs    map[string]string
	rangeOf map[string]int
	errs    []string
}

func (r *recorder) handler(member string, inf *shard.Informer) *view {
	return &view{rec: r, member: member, inf: inf, objs: map[string]string{}, rangeOf: map[string]int{}}
}

func (v *view) record(op string, obj any, apply func(key, rv string)) {
	start := v.rec.seq.Add(1)
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	cm := obj.(*corev1.ConfigMap)
	key := v.kind + cm.Namespace + "/" + cm.Name
	r, _ := v.inf.RangeOf(cm)
	v.mu.Lock()
	apply(key, cm.ResourceVersion)
	v.rangeOf[key] = r.Index
	v.mu.Unlock()
	end := v.rec.seq.Add(1)
	v.rec.mu.Lock()
	v.rec.calls = append(v.rec.calls, call{member: v.member, rng: r.Index, start: start, end: end, op: op, key: key})
	v.rec.mu.Unlock()
}

func (v *view) OnAdd(obj any, _ bool) {
	v.record("add", obj, func(k, rv string) {
		if _, dup := v.objs[k]; dup {
			v.errs = append(v.errs, "add of "+k+" it holds")
		}
		v.objs[k] = rv
	})
}

func (v *view) OnUpdate(_, obj any) {
	v.record("update", obj, func(k, rv string) {
		if _, ok := v.objs[k]; !ok {
			v.errs = append(v.errs, "update of "+k+" it does not hold")
		}
		v.objs[k] = rv
	})
}

func (v *view) OnDelete(obj any) {
	_, handedOver := obj.(cache.DeletedFinalStateUnknown)
	v.record("delete", obj, func(k, _ string) {
		// A tombstone for a key it does not hold is the previous deliverer's
		// object, gone before this member gave the range to its handlers.
		if _, ok := v.objs[k]; !ok && !handedOver {
			v.errs = append(v.errs, "delete of "+k+" it does not hold")
		}
		delete(v.objs, k)
	})
}

func (v *view) OnAcquire(r shard.Range, _ uint64) { v.mark("acquire", r) }

// OnRelease drops the range's objects, as a controller forgets them.
func (v *view) OnRelease(r shard.Range) {
	v.mark("release", r)
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, idx := range v.rangeOf {
		if idx == r.Index {
			delete(v.objs, k)
			delete(v.rangeOf, k)
		}
	}
}

// holds reports whether the member's handler holds key.
func (v *view) holds(key string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.objs[key]
	return ok
}

func (v *view) snapshot() map[string]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps(v.objs)
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// exclusive is promise 1: per range, a call of one member never overlaps a
// call of another.
func (r *recorder) exclusive() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	byRange := map[int][]call{}
	for _, c := range r.calls {
		byRange[c.rng] = append(byRange[c.rng], c)
	}
	var errs []string
	for rng, cs := range byRange {
		sort.Slice(cs, func(i, j int) bool { return cs[i].start < cs[j].start })
		for i := 1; i < len(cs); i++ {
			a, b := cs[i-1], cs[i]
			if a.member != b.member && a.end > b.start {
				errs = append(errs, fmt.Sprintf("range %d: %s's %s of %s overlaps %s's %s of %s", rng, a.member, a.op, a.key, b.member, b.op, b.key))
			}
		}
	}
	return errs
}

func timeoutCh(d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	time.AfterFunc(d, func() { close(ch) })
	return ch
}

// noLeaks fails if, a few seconds after everything stopped, a goroutine
// runs code of this module or a watch of apimachinery (the protoactor
// cluster's own goroutines, which outlive its Shutdown, are not ours).
func noLeaks(t testing.TB) {
	t.Helper()
	var last string
	for range 50 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		last = ""
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "shard_test.") || strings.Contains(g, "testing.") && !strings.Contains(g, "actorinformer/actorinformer/") {
				continue
			}
			if strings.Contains(g, "github.com/actorinformer/actorinformer/") || strings.Contains(g, "k8s.io/apimachinery/pkg/watch") {
				last = g
				break
			}
		}
		if last == "" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("a goroutine of ours outlived the informer:\n%s", last)
}
