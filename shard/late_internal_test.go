package shard

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard/handover"
)

// nop is a handler that does nothing.
var nop = actors.ContextEventHandlerFuncs{}

// cm is a ConfigMap ns/name with uid.
func cm(name string, uid types.UID) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid}}
}

// Within lateHandoffMemory of a range's activation, a handler given the
// delete of an object (plain or as a tombstone) gets no second one from a
// late handoff; the objects it never saw deleted still get one. Past it,
// nothing is remembered.
func TestLateHandoffSkipsDeletesTheHandlerSaw(t *testing.T) {
	refs := []handover.ObjectRef{{Key: "ns/a", UID: "ua"}, {Key: "ns/b", UID: "ub"}, {Key: "ns/c", UID: "uc"}}
	keys := func(rs []handover.ObjectRef) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Key)
		}
		return out
	}

	ri := &rangeInformer{lateUntil: time.Now().Add(time.Hour)}
	h := newRangeHandler(&registration{}, ri, nop)
	h.deletedOne(cm("a", "ua"))
	h.deletedOne(cache.DeletedFinalStateUnknown{Key: "ns/b", Obj: cm("b", "ub")})
	h.deletedOne(cm("c", "another-uid")) // a namesake: not the handoff's c
	if got := keys(h.unseenDeletes(refs)); !slices.Equal(got, []string{"ns/c"}) {
		t.Errorf("tombstones for %v, want only ns/c", got)
	}

	// A range whose memory is not open: nothing is remembered.
	h = newRangeHandler(&registration{}, &rangeInformer{}, nop)
	h.deletedOne(cm("a", "ua"))
	if got := keys(h.unseenDeletes(refs)); len(got) != 3 {
		t.Errorf("tombstones for %v, want all three", got)
	}

	// The memory ends with the wait.
	ri = &rangeInformer{lateUntil: time.Now().Add(50 * time.Millisecond)}
	h = newRangeHandler(&registration{}, ri, nop)
	h.deletedOne(cm("a", "ua"))
	time.Sleep(60 * time.Millisecond)
	h.deletedOne(cm("b", "ub"))
	if h.deleted != nil {
		t.Errorf("%d deletes remembered after the wait", len(h.deleted))
	}
	if got := keys(h.unseenDeletes(refs)); len(got) != 3 {
		t.Errorf("tombstones for %v after the wait, want all three", got)
	}

	// And with the count.
	defer func(n int) { lateHandoffDeletes = n }(lateHandoffDeletes)
	lateHandoffDeletes = 2
	h = newRangeHandler(&registration{}, &rangeInformer{lateUntil: time.Now().Add(time.Hour)}, nop)
	h.deletedOne(cm("a", "ua"))
	h.deletedOne(cm("b", "ub"))
	if got := keys(h.unseenDeletes(refs)); !slices.Equal(got, []string{"ns/c"}) {
		t.Errorf("tombstones for %v at the bound, want only ns/c", got)
	}
	h.deletedOne(cm("c", "uc"))
	if got := keys(h.unseenDeletes(refs)); len(got) != 3 {
		t.Errorf("tombstones for %v past the bound, want all three (nothing remembered)", got)
	}
}

// A range activated with a handoff that names the deletes an earlier
// deliverer's handlers were given: a late handoff, or the objects merged
// into that handoff, give no OnDelete for them; and the range's own
// handoff names them again, with its handlers' own, at most
// lateHandoffDeletes.
func TestInheritedDeletes(t *testing.T) {
	refs := []handover.ObjectRef{{Key: "ns/a", UID: "ua"}, {Key: "ns/b", UID: "ub"}, {Key: "ns/c", UID: "uc"}}
	ri := &rangeInformer{lateUntil: time.Now().Add(time.Hour), inherited: map[string]struct{}{"ua": {}}}
	var got []string
	for _, o := range ri.notInherited(refs) {
		got = append(got, o.Key)
	}
	if !slices.Equal(got, []string{"ns/b", "ns/c"}) {
		t.Errorf("not inherited: %v, want ns/b, ns/c", got)
	}
	h1 := newRangeHandler(&registration{}, ri, nop)
	h2 := newRangeHandler(&registration{}, ri, nop)
	h1.deletedOne(cm("b", "ub"))
	h2.deletedOne(cm("b", "ub"))
	h2.deletedOne(cm("d", "ud"))
	if got := ri.deletedUIDs([]*rangeHandler{h1, h2}); !slices.Equal(got, []string{"ua", "ub", "ud"}) {
		t.Errorf("the handoff's deletes: %v, want ua, ub, ud", got)
	}
	defer func(n int) { lateHandoffDeletes = n }(lateHandoffDeletes)
	lateHandoffDeletes = 2
	if got := ri.deletedUIDs([]*rangeHandler{h1, h2}); len(got) != 2 {
		t.Errorf("the handoff's deletes past the bound: %v, want 2", got)
	}
	if got := (&rangeInformer{}).deletedUIDs([]*rangeHandler{newRangeHandler(&registration{}, &rangeInformer{}, nop)}); got != nil {
		t.Errorf("deletes with none remembered: %v", got)
	}
}
