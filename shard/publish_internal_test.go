package shard

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// The status published after each of the core's steps is always the
// core's, and a step that changed nothing of it (a tick's, most of them)
// publishes nothing new and allocates nothing for it: a new copy at each
// step had cost three members 1.4 MB at 20,000 pods.
func TestPublishStatusOnChange(t *testing.T) {
	self := handover.NewMemberID("node-a", "1")
	core := handover.NewCore(handover.Config{Self: self, Ranges: 16, HashField: "uid", DiscoveryTicks: 2, HelloTicks: 2,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second})
	inc := &incarnation{s: &Informer{shared: &shared{}}, core: core}
	check := func(when string) *handover.Status {
		t.Helper()
		inc.publishStatus()
		got := inc.s.protocol.Load()
		if want := core.Status(); !reflect.DeepEqual(*got, want) {
			t.Fatalf("%s: published %+v, want the core's %+v", when, *got, want)
		}
		return got
	}
	first := check("at the start")
	if a := testing.AllocsPerRun(100, func() { inc.publishStatus() }); a != 0 {
		t.Errorf("publishing an unchanged status allocated %v times, want 0", a)
	}
	if inc.s.protocol.Load() != first {
		t.Error("an unchanged status was published anew")
	}
	// Through the group's forming: the view, each range's state.
	changes := 0
	prev := first
	steps := []handover.Input{&handover.Topology{Nodes: []handover.NodeID{"node-a"}}}
	for i := 1; i <= 20; i++ {
		steps = append(steps, &handover.Tick{Now: time.Duration(i) * 200 * time.Millisecond})
	}
	token := uint64(100)
	for i, in := range steps {
		now := time.Duration(i) * 200 * time.Millisecond
		// The effects are answered at once: the ranges' informers sync,
		// the lease is written, the handlers take the ranges.
		queue := []handover.Input{in}
		for len(queue) > 0 {
			for _, m := range core.Step(queue[0]) {
				switch e := m.Body.(type) {
				case *handover.StartRange:
					queue = append(queue, &handover.RangeSynced{Range: e.Range, Epoch: e.Epoch, Live: true})
				case *handover.RenewLease:
					token++
					queue = append(queue, &handover.LeaseRenewed{Seq: e.Seq, Start: now, Now: now, Token: token},
						&handover.Leases{Now: now, Leases: []handover.LeaseRecord{{Holder: self, Version: strconv.FormatUint(token, 10)}}})
				}
			}
			queue = queue[1:]
		}
		if cur := check("after step " + reflect.TypeOf(in).String()); cur != prev {
			changes++
			prev = cur
		} else if i > 0 && !reflect.DeepEqual(core.Status(), *cur) {
			t.Fatalf("step %d: a changed status was not published", i)
		}
	}
	if changes == 0 {
		t.Fatal("the status never changed: the test no longer forms the group")
	}
}

// sameStatus compares every field of handover.Status and RangeStatus: a
// field added to them must be added to it.
func TestSameStatusFields(t *testing.T) {
	want := map[reflect.Type]int{reflect.TypeOf(handover.Status{}): 11, reflect.TypeOf(handover.RangeStatus{}): 6}
	for typ, n := range want {
		if typ.NumField() != n {
			t.Errorf("%s has %d fields, sameStatus compares %d: compare the new ones", typ, typ.NumField(), n)
		}
	}
	a := handover.Status{Ranges: []handover.RangeStatus{{State: "idle"}}}
	b := a
	b.Ranges = []handover.RangeStatus{{State: "idle", Waiting: []handover.MemberID{}}}
	if sameStatus(&a, &b) {
		t.Error("a nil and an empty Waiting compare the same")
	}
}
