package indexer

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

// TestMutationDetector: a change to an object given to AddObject is found
// by the next Check, and an object's copy is kept for two retain periods,
// as in client-go's detector. (On the whole pipeline, with a handler
// changing what it is given: internal/sim's testdata/mutation_*.txt.)
func TestMutationDetector(t *testing.T) {
	clk := newFakeClock()
	d := NewMutationDetector("*v1.Pod", clk)
	a, b := pod("ns", "a", "1"), pod("ns", "b", "1")
	d.AddObject(a)
	d.AddObject(cache.DeletedFinalStateUnknown{Key: "ns/b", Obj: b}) // not kept
	d.AddObject("not an object")                                     // not kept
	if err := d.Check(); err != nil {
		t.Fatalf("Check with nothing changed: %v", err)
	}
	b.Labels = map[string]string{"changed": "yes"}
	if err := d.Check(); err != nil {
		t.Fatalf("a tombstone's object was kept: %v", err)
	}
	a.Labels = map[string]string{"changed": "yes"}
	err := d.Check()
	var me *MutationError
	if !errors.As(err, &me) || err.Error() != "cache *v1.Pod modified" || len(me.Diffs) != 1 ||
		!strings.HasPrefix(me.Diffs[0], "CACHE *v1.Pod[0] ALTERED!\n") || !strings.Contains(me.Diffs[0], "changed") {
		t.Fatalf("Check after a change = %#v", err)
	}
	a.Labels = nil

	// Retention: a copy is checked from its AddObject through the rotation
	// after next (MutationRetain to twice that).
	c := pod("ns", "c", "1")
	d.AddObject(c)
	if err := d.Check(); err != nil { // c is in the current rotation
		t.Fatal(err)
	}
	clk.Step(MutationRetain + time.Second)
	c.Labels = map[string]string{"changed": "yes"}
	if err := d.Check(); err == nil { // rotated: c is retained, still checked
		t.Fatal("a retained object's change was not found")
	}
	clk.Step(MutationRetain + time.Second)
	if err := d.Check(); err != nil { // rotated again: c is dropped
		t.Fatalf("an object kept past two rotations: %v", err)
	}
}

// TestMutationDetectorRun: Run checks at once, panicking with client-go's
// message on a change, and returns when stopped.
func TestMutationDetectorRun(t *testing.T) {
	d := NewMutationDetector("*v1.Pod", newFakeClock())
	d.AddObject(pod("ns", "a", "1"))
	stop := make(chan struct{})
	close(stop)
	d.Run(stop) // nothing changed: one check, then it stops

	a := pod("ns", "a", "1")
	d = NewMutationDetector("*v1.Pod", newFakeClock())
	d.AddObject(a)
	a.Labels = map[string]string{"changed": "yes"}
	defer func() {
		if r := recover(); r != "cache *v1.Pod modified" {
			t.Fatalf("Run after a change: recovered %v", r)
		}
	}()
	d.Run(make(chan struct{}))
	t.Fatal("Run returned after a change")
}
