//go:build !race

package shard_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/actorinformer/actorinformer/shard"
)

// A group of two kinds, hashed by namespace: ConfigMaps (New's) and a
// second kind, "secrets" (AddKind). The member that delivers a namespace's
// ConfigMaps delivers its secrets; through a kill and a graceful leave no
// call of one member on a range overlaps another's on that range, of
// either kind; and the objects of either kind deleted while the killed
// member's ranges had no deliverer reach a handler as deletes (each kind
// resumes from its own position).
func TestKindsMoveTogether(t *testing.T) {
	src, sec := newMemServer(), newMemServer()
	for _, s := range []*memServer{src, sec} {
		s.filter, s.spaces = true, 24
		for i := range 240 {
			s.create(fmt.Sprintf("o%d", i))
		}
	}
	g := newGroup(t, src, shard.WithHashField(shard.Namespace))
	g.second = sec
	defer g.stopAll()
	g.joinMany(3)
	eventually(t, 30*time.Second, "three members settled", g.settled)
	together(t, g)

	// The member holding the most objects.
	ms := g.members()
	victim := ms[0]
	for _, m := range ms {
		if len(m.view.snapshot()) > len(victim.view.snapshot()) {
			victim = m
		}
	}
	// Its positions reach its lease with its renewals.
	eventually(t, 10*time.Second, "the member to kill has its positions on its lease", func() string { return g.positioned(victim) })
	var gone []string
	for _, k := range src.keys() {
		if victim.view.holds(k) && len(gone) < 15 {
			gone = append(gone, k)
		}
	}
	for _, k := range sec.keys() {
		if victim.secondView.holds("secrets:"+k) && len(gone) < 30 {
			gone = append(gone, "secrets:"+k)
		}
	}
	if len(gone) < 30 {
		t.Fatalf("the member to kill holds %d objects of the two kinds; want 15 of each", len(gone))
	}
	g.kill(victim)
	for _, k := range gone {
		if s, ok := strings.CutPrefix(k, "secrets:"); ok {
			sec.remove(s)
		} else {
			src.remove(k)
		}
	}
	eventually(t, 30*time.Second, "two members settled after the kill", g.settled)
	together(t, g)
	last := lastCalls(g)
	for _, k := range gone {
		if c := last[k]; c.op != "delete" {
			t.Errorf("%s was deleted while its range had no deliverer; the last handler call on it was %s's %q", k, c.member, c.op)
		}
	}

	// A join copies both kinds' ranges from their deliverers: it lists
	// nothing but its scope check's one object of each kind.
	lists := []int64{src.lists.Load(), sec.lists.Load()}
	g.join()
	eventually(t, 30*time.Second, "three members settled after a join", g.settled)
	together(t, g)
	for i, s := range []*memServer{src, sec} {
		if n := s.lists.Load() - lists[i]; n != 1 {
			t.Errorf("kind %d: %d lists while a member joined, want the scope check's alone", i, n)
		}
	}
	g.leave(g.members()[0])
	eventually(t, 30*time.Second, "two members settled after a leave", g.settled)
	together(t, g)
	if errs := g.rec.exclusive(); len(errs) > 0 {
		t.Errorf("%d overlapping calls, first %s", len(errs), errs[0])
	}
}

// together fails unless, for every namespace, one member's handlers hold
// its objects of both kinds.
func together(t *testing.T, g *group) {
	t.Helper()
	owner := map[string]string{} // namespace → member
	for _, m := range g.members() {
		for _, v := range []*view{m.view, m.secondView} {
			for k := range v.snapshot() {
				ns := strings.SplitN(strings.TrimPrefix(k, "secrets:"), "/", 2)[0]
				if o, ok := owner[ns]; ok && o != m.name {
					t.Errorf("namespace %s: %s's handlers hold %s, and %s's hold some of its objects", ns, m.name, k, o)
				}
				owner[ns] = m.name
			}
		}
	}
}

// lastCalls is the last handler call on each key, across members.
func lastCalls(g *group) map[string]call {
	g.rec.mu.Lock()
	calls := slices.Clone(g.rec.calls)
	g.rec.mu.Unlock()
	slices.SortFunc(calls, func(a, b call) int { return int(a.end - b.end) })
	last := map[string]call{}
	for _, c := range calls {
		last[c.key] = c
	}
	return last
}

// AddKind refuses what a group cannot carry: a second kind in a group
// hashed by uid, a resource that is not a name, the same kind twice, and
// a kind once the group has started. A member whose kinds differ from the
// group's waits, as for other settings.
func TestAddKindRefusesAndKindsAreSettings(t *testing.T) {
	src := newMemServer()
	src.filter = true
	g := newGroup(t, src, shard.WithHashField(shard.Namespace))
	defer g.stopAll()
	m := g.join()
	eventually(t, 30*time.Second, "one member settled", g.settled)
	secrets := schema.GroupResource{Resource: "secrets"}
	if _, err := m.inf.AddKind(secrets, newMemServer(), &corev1.ConfigMap{}); err == nil || !strings.Contains(err.Error(), "started") {
		t.Errorf("AddKind after Run: %v", err)
	}

	c, prov := startCluster(g.agent)
	defer stopCluster(c, prov)
	byUID, err := shard.New(c, "by-uid", src, &corev1.ConfigMap{}, testLeases()...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := byUID.AddKind(secrets, newMemServer(), &corev1.ConfigMap{}); err == nil || !strings.Contains(err.Error(), "namespace") {
		t.Errorf("AddKind on a group hashed by uid: %v", err)
	}
	other, err := shard.New(c, g.name, src, &corev1.ConfigMap{}, append(testLeases(), shard.WithHashField(shard.Namespace))...)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []schema.GroupResource{{}, {Resource: "a,b"}, {Resource: "x", Group: "a/b"}} {
		if _, err := other.AddKind(bad, newMemServer(), &corev1.ConfigMap{}); err == nil {
			t.Errorf("AddKind(%q) took it", bad.String())
		}
	}
	if _, err := other.AddKind(secrets, newMemServer(), &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.AddKind(secrets, newMemServer(), &corev1.ConfigMap{}); err == nil {
		t.Error("the same kind twice was taken")
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		other.Run(stop)
	}()
	eventually(t, 10*time.Second, "the member with another kind waiting", func() string {
		if w := other.Waiting(); !strings.Contains(w, "kinds=secrets") {
			return fmt.Sprintf("waiting: %q", w)
		}
		return ""
	})
	close(stop)
	<-done
	if w := m.inf.Waiting(); w != "" {
		t.Errorf("the group's member waits: %s", w)
	}
	eventually(t, 30*time.Second, "the group's member settled", g.settled)
}
