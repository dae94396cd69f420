package shard

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/shardtest"
)

// A range's record keeps the newest delivery's final position: a write
// creates it, a newer token's replaces it, an older token's (a late
// release of a lost member) leaves it, and each member reads it back. The
// records are labelled apart from the member leases.
func TestRangeRecordKeepsTheNewestPosition(t *testing.T) {
	cs := fake.NewClientset()
	a := newLeases(cs.CoordinationV1(), "default", "g", "a#1", "addr", 15*time.Second, 10*time.Second)
	b := newLeases(cs.CoordinationV1(), "default", "g", "b#1", "addr", 15*time.Second, 10*time.Second)
	ctx := context.Background()
	if _, found, err := a.readRecord(ctx, 3); err != nil || found {
		t.Fatalf("no record yet: found %v, err %v", found, err)
	}
	steps := []struct {
		by   *leases
		rec  rangeRecord
		want rangeRecord
	}{
		{a, rangeRecord{token: 10, position: 100, version: 99}, rangeRecord{token: 10, position: 100, version: 99}},
		{b, rangeRecord{token: 20, position: 150, version: 150}, rangeRecord{token: 20, position: 150, version: 150}},
		{a, rangeRecord{token: 10, position: 120, version: 120}, rangeRecord{token: 20, position: 150, version: 150}},
		{b, rangeRecord{token: 20, position: 160, version: 155}, rangeRecord{token: 20, position: 160, version: 155}},
	}
	for i, s := range steps {
		if _, err := s.by.writeRecord(ctx, 3, s.rec, ""); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		got, found, err := b.readRecord(ctx, 3)
		if err != nil || !found || got != s.want {
			t.Fatalf("after write %d: %+v (found %v, err %v), want %+v", i, got, found, err, s.want)
		}
	}
	l, err := cs.CoordinationV1().Leases("default").Get(ctx, recordName("g", 3), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Labels[LabelGroup] != "" || l.Labels[LabelRecordOf] != "g" {
		t.Fatalf("labels %v: want %s=g and no %s", l.Labels, LabelRecordOf, LabelGroup)
	}
	if recordName("g", 3) == recordName("g", 4) || recordName("g", 3) == recordName("h", 3) {
		t.Fatal("record names collide")
	}
}

// A write that meets a conflict (another member wrote between its read
// and its update) reads again and keeps the newer position; a record
// that keeps changing, or an API server that refuses, is an error, not a
// silent success; a malformed record is an error when read.
func TestRangeRecordCompareAndSwap(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	a := newLeases(cs.CoordinationV1(), "default", "g", "a#1", "addr", 15*time.Second, 10*time.Second)
	b := newLeases(cs.CoordinationV1(), "default", "g", "b#1", "addr", 15*time.Second, 10*time.Second)
	if _, err := a.writeRecord(ctx, 0, rangeRecord{token: 5, position: 50}, ""); err != nil {
		t.Fatal(err)
	}
	// b's first update meets a newer write of a's, made after b read.
	first := true
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if first {
			first = false
			// a's write, through the tracker (the fake client is locked
			// while its reactors run).
			obj, err := cs.Tracker().Get(gvr, "default", recordName("g", 0))
			if err != nil {
				t.Error(err)
				return false, nil, nil
			}
			l := obj.(*coordinationv1.Lease).DeepCopy()
			l.Annotations[AnnotationRecord] = rangeRecord{token: 30, position: 300}.encode()
			if err := cs.Tracker().Update(gvr, l, "default"); err != nil {
				t.Error(err)
			}
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, recordName("g", 0), errors.New("changed"))
		}
		return false, nil, nil
	})
	if _, err := b.writeRecord(ctx, 0, rangeRecord{token: 20, position: 200}, ""); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := a.readRecord(ctx, 0); got.token != 30 || got.position != 300 {
		t.Fatalf("record %+v, want a's newer one (token 30)", got)
	}
	// Always a conflict: the write gives up with an error.
	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, recordName("g", 0), errors.New("changed"))
	})
	if _, err := b.writeRecord(ctx, 0, rangeRecord{token: 40, position: 400}, ""); err == nil {
		t.Fatal("a write that always conflicts succeeded")
	}
	cs.PrependReactor("get", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "leases"}, recordName("g", 0), errors.New("no"))
	})
	if _, err := b.writeRecord(ctx, 0, rangeRecord{token: 40, position: 400}, ""); !apierrors.IsForbidden(err) {
		t.Fatalf("a forbidden read gave %v, want the error", err)
	}
	if _, _, err := b.readRecord(ctx, 0); !apierrors.IsForbidden(err) {
		t.Fatalf("a forbidden read gave %v, want the error", err)
	}
	for _, bad := range []string{"", "1:2", "x:1:2", "1:-2:3", "1:2:3:4"} {
		if _, err := decodeRecord(bad); err == nil {
			t.Errorf("decodeRecord(%q) took it", bad)
		}
	}
}

// A release writes the range's record, with its final position and the
// newest version its handlers were given, before the core hears of the
// release (RangeStopped), so before any member can hear of it; the
// handoff carries the same position.
func TestReleaseWritesTheRecordFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig, h := newLoggedRig(t, time.Hour)
		rig.start()
		w := <-rig.watches
		rig.io.rangeEffect(&handover.ActivateRange{Range: 0, Epoch: 1, Token: 9})
		if in := <-rig.reports; in != nil {
			t.Fatalf("report %T, want the activation's", in)
		}
		w.Add(cmAt("d", "ud", "15"))
		synctest.Wait()
		if _, found, _ := rig.inc.leases.readRecord(context.Background(), 0); found {
			t.Fatal("a record before any release")
		}
		rig.io.rangeEffect(&handover.DeactivateRange{Range: 0, Epoch: 1, To: "node-c#1"})
		in := <-rig.reports
		stopped, ok := in.(*handover.RangeStopped)
		if !ok || stopped.Handoff == nil {
			t.Fatalf("report %+v, want RangeStopped with a handoff", in)
		}
		rec, found, err := rig.inc.leases.readRecord(context.Background(), 0)
		if err != nil || !found {
			t.Fatalf("no record when the release was reported (err %v)", err)
		}
		if rec.token != 9 || rec.position < 15 || rec.version != 15 || rec.position != stopped.Handoff.Position {
			t.Fatalf("record %+v, handoff %+v: want token 9, position of the handoff (15 or more), version 15", rec, stopped.Handoff)
		}
		if got := h.get(); !slices.Contains(got, "add ns/d@15") {
			t.Fatalf("calls %v: the handlers were not given ns/d before the release", got)
		}
		rig.stop()
		time.Sleep(time.Minute) // the actor system's dead-letter throttle
	})
}

// A release writes the position and names the next owner (or none): the
// record's holder, whose token is the write's resourceVersion, each above
// the last write's, whoever made it.
func TestRangeRecordReleaseNamesTheNextOwner(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	shardtest.InstallLeases(cs)
	a := newLeases(cs.CoordinationV1(), "default", "g", "a#1", "addr", 15*time.Second, 10*time.Second)
	b := newLeases(cs.CoordinationV1(), "default", "g", "b#1", "addr", 15*time.Second, 10*time.Second)
	holder := func() (string, string) {
		t.Helper()
		l, err := cs.CoordinationV1().Leases("default").Get(ctx, recordName("g", 2), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		h := ""
		if l.Spec.HolderIdentity != nil {
			h = *l.Spec.HolderIdentity
		}
		return h, l.ResourceVersion
	}
	var last uint64
	for i, step := range []struct {
		by   *leases
		rec  rangeRecord
		next handover.MemberID
	}{
		{a, rangeRecord{token: 10, position: 100, version: 90}, "b#1"},
		{b, rangeRecord{token: 20, position: 120, version: 110}, ""},
		{a, rangeRecord{token: 30, position: 130, version: 120}, "b#1"},
	} {
		tok, err := step.by.writeRecord(ctx, 2, step.rec, step.next)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		h, rv := holder()
		if h != string(step.next) || strconv.FormatUint(tok, 10) != rv || tok <= last {
			t.Fatalf("step %d: holder %q at %s, token %d (last %d); want %q, the record's version, above the last", i, h, rv, tok, last, step.next)
		}
		last = tok
	}
	// A release older than the record's writes nothing, and names no one.
	if tok, err := b.writeRecord(ctx, 2, rangeRecord{token: 20, position: 125}, "a#1"); err != nil || tok != 0 {
		t.Fatalf("an older release: token %d, err %v; want 0 and nothing written", tok, err)
	}
	if h, _ := holder(); h != "b#1" {
		t.Fatalf("holder %q after an older release, want b#1 still", h)
	}
}
