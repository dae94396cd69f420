package shard

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync/atomic"
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
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/shardtest"
)

// Claims write a range's record only at the generation they name, all
// of one batch in one write whose resourceVersion is each written claim's
// token; a release writes no holder and the final position, only while
// the record names the releaser; every member reads the final position
// back. The records object is labelled apart from the member leases.
func TestRangeRecordsClaimAndRelease(t *testing.T) {
	cs, a, b := twoMembersLeases()
	ctx := context.Background()
	if _, found, err := a.readRecord(ctx, 3); err != nil || found {
		t.Fatalf("no record yet: found %v, err %v", found, err)
	}
	res, _, err := a.claimRecords(ctx, []handover.RecordClaim{{Range: 3, Epoch: 7, Gen: 0}, {Range: 4, Epoch: 8, Gen: 0}}, "a#1")
	if err != nil || !res[0].OK || !res[1].OK || res[0].Token == 0 || res[0].Token != res[1].Token || res[0].Epoch != 7 ||
		res[0].Record != (handover.RecordState{Range: 3, Holder: "a#1", Gen: 1}) {
		t.Fatalf("first claims: %+v, %v; want both written by one write, record 3 a#1 at generation 1", res, err)
	}
	first := res[0].Token
	// b claims range 3 at generation 0, which a's write changed: refused,
	// with the record as it is; its claim of range 5 in the same batch is
	// written.
	res, _, err = b.claimRecords(ctx, []handover.RecordClaim{{Range: 3, Gen: 0}, {Range: 5, Gen: 0}}, "b#1")
	if err != nil || res[0].OK || res[0].Record != (handover.RecordState{Range: 3, Holder: "a#1", Gen: 1}) || !res[1].OK || res[1].Token <= first {
		t.Fatalf("claims on a changed record: %+v, %v; want 3 refused (a#1 at 1), 5 written above %d", res, err, first)
	}
	// a takes range 5 over from b (at the generation b's claim wrote): the
	// claim names b#1 as the holder it replaced, b's last delivery.
	res, finals, err := a.claimRecords(ctx, []handover.RecordClaim{{Range: 5, Gen: 1}}, "a#1")
	if err != nil || !res[0].OK || !reflect.DeepEqual(finals[5], claimedFinal{replaced: "b#1"}) {
		t.Fatalf("a takeover's claim: %+v, %+v, %v; want written, replacing b#1", res, finals, err)
	}
	// b's release of range 3, which a holds, writes nothing.
	if rec, err := b.releaseRecord(ctx, 3, rangeRecord{token: 1, position: 5}, nil, "b#1", ""); err != nil || rec != nil {
		t.Fatalf("a release by a member the record does not name: %+v, %v", rec, err)
	}
	want := rangeRecord{token: first, position: 100, version: 99}
	rec, err := a.releaseRecord(ctx, 3, want, nil, "a#1", "b#1")
	if err != nil || rec == nil || *rec != (handover.RecordState{Range: 3, Gen: 2, Next: "b#1"}) {
		t.Fatalf("a's release: %+v, %v; want no holder at generation 2, for b#1", rec, err)
	}
	if got, found, err := b.readRecord(ctx, 3); err != nil || !found || got != want {
		t.Fatalf("final position %+v (found %v, err %v), want %+v", got, found, err, want)
	}
	// b claims at generation 2: written, the final position and the
	// release's next kept, and the final position is the claim's to
	// resume from.
	res, finals, err = b.claimRecords(ctx, []handover.RecordClaim{{Range: 3, Gen: 2}, {Range: 6, Gen: 4}}, "b#1")
	if err != nil || !res[0].OK || res[0].Record != (handover.RecordState{Range: 3, Holder: "b#1", Gen: 3, Next: "b#1"}) || res[1].OK {
		t.Fatalf("claim after the release: %+v, %v", res, err)
	}
	if len(finals) != 1 || !reflect.DeepEqual(finals[3], claimedFinal{rec: want}) {
		t.Fatalf("the claim's final positions: %+v, want range 3's %+v alone", finals, want)
	}
	if got, _, _ := a.readRecord(ctx, 3); got != want {
		t.Fatalf("a claim changed the final position: %+v", got)
	}
	l, err := cs.CoordinationV1().Leases("default").Get(ctx, recordsName("g"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Labels[LabelGroup] != "" || l.Labels[LabelRecordOf] != "g" {
		t.Fatalf("labels %v: want %s=g and no %s", l.Labels, LabelRecordOf, LabelGroup)
	}
	states, bad := recordStates(l, 8)
	if len(bad) > 0 || !slices.Equal(states, []handover.RecordState{{Range: 3, Holder: "b#1", Gen: 3, Next: "b#1"}, {Range: 4, Holder: "a#1", Gen: 1}, {Range: 5, Holder: "a#1", Gen: 2}}) {
		t.Fatalf("record states %+v (%v)", states, bad)
	}
	if recordsName("g") == recordsName("h") {
		t.Fatal("record names collide")
	}
}

// A write that meets a conflict (another member wrote between its read
// and its update) reads again: a claim whose range another member's write
// left alone is still written. A record that keeps changing, or an API
// server that refuses, is an error, each claim failed (generation 0); a
// malformed record is an error when read.
func TestRangeRecordCompareAndSwap(t *testing.T) {
	ctx := context.Background()
	cs, a, b := twoMembersLeases()
	if res, _, err := a.claimRecords(ctx, []handover.RecordClaim{{Range: 0}}, "a#1"); err != nil || !res[0].OK {
		t.Fatal(res, err)
	}
	// b's first update meets a write of a's to range 1, made after b read.
	first := true
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		if first {
			first = false
			// a's write, through the tracker (the fake client is locked
			// while its reactors run).
			obj, err := cs.Tracker().Get(gvr, "default", recordsName("g"))
			if err != nil {
				t.Error(err)
				return false, nil, nil
			}
			l := obj.(*coordinationv1.Lease).DeepCopy()
			l.Annotations[rangeKey(1)] = recordEntry{gen: 1, holder: "a#1"}.encode()
			if err := cs.Tracker().Update(gvr, l, "default"); err != nil {
				t.Error(err)
			}
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, recordsName("g"), errors.New("changed"))
		}
		return false, nil, nil
	})
	res, _, err := b.claimRecords(ctx, []handover.RecordClaim{{Range: 1}, {Range: 2}}, "b#1")
	if err != nil || res[0].OK || res[0].Record.Holder != "a#1" || !res[1].OK {
		t.Fatalf("after a conflict: %+v, %v; want range 1 refused (a#1's), range 2 written", res, err)
	}
	// Always a conflict: the write gives up with an error.
	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "leases"}, recordsName("g"), errors.New("changed"))
	})
	res, _, err = b.claimRecords(ctx, []handover.RecordClaim{{Range: 3}}, "b#1")
	if err == nil || res[0].OK || res[0].Record.Gen != 0 {
		t.Fatalf("a write that always conflicts: %+v, %v; want an error and the claim failed", res, err)
	}
	cs.PrependReactor("get", "leases", func(k8stesting.Action) (bool, kruntime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "leases"}, recordsName("g"), errors.New("no"))
	})
	if _, err := b.releaseRecord(ctx, 0, rangeRecord{token: 40, position: 400}, nil, "b#1", ""); !apierrors.IsForbidden(err) {
		t.Fatalf("a forbidden read gave %v, want the error", err)
	}
	if _, _, err := b.readRecord(ctx, 0); !apierrors.IsForbidden(err) {
		t.Fatalf("a forbidden read gave %v, want the error", err)
	}
	for _, bad := range []string{"", "1:2", "{", `{"gen":0}`, `{"gen":1,"position":-1}`, `{"gen":"x"}`, `{"gen":1,"kinds":{"secrets":{"p":-1}}}`} {
		if _, err := decodeEntry(bad); err == nil {
			t.Errorf("decodeEntry(%q) took it", bad)
		}
	}
}

// A record's bytes: a one-kind group's are as they were before groups
// had kinds (members of earlier versions read them); the kinds after
// New's add their parts under "kinds".
func TestRangeRecordBytes(t *testing.T) {
	for _, tc := range []struct {
		e    recordEntry
		want string
	}{{
		e:    recordEntry{gen: 4, holder: "node:1#x", next: "c#z", final: rangeRecord{token: 5, position: 6, version: 7, by: "b:2#y"}},
		want: `{"gen":4,"holder":"node:1#x","next":"c#z","by":"b:2#y","token":5,"position":6,"version":7}`,
	}, {
		e: recordEntry{gen: 4, final: rangeRecord{token: 5, position: 6, version: 7, by: "b:2#y"},
			kinds: kindFinals{"secrets": {Position: 8, Version: 9}, "replicasets.apps": {Position: 3}}},
		want: `{"gen":4,"by":"b:2#y","token":5,"position":6,"version":7,"kinds":{"replicasets.apps":{"p":3},"secrets":{"p":8,"v":9}}}`,
	}} {
		if got := tc.e.encode(); got != tc.want {
			t.Errorf("encoded %s, want %s", got, tc.want)
		}
		if got, err := decodeEntry(tc.want); err != nil || !reflect.DeepEqual(got, tc.e) {
			t.Errorf("%s decoded: %+v, %v; want %+v", tc.want, got, err, tc.e)
		}
	}
	// A claim finds every kind's part; a kind the record lacks (a kind
	// added since) resumes from nothing.
	f := claimedFinal{rec: rangeRecord{token: 5, position: 6, version: 7, by: "b:2#y"}, kinds: kindFinals{"secrets": {Position: 8, Version: 9}}}
	sh := &shared{}
	cms, secrets, pods := sh.newKind(nil, nil, ""), sh.newKind(nil, nil, "secrets"), sh.newKind(nil, nil, "pods")
	if got := f.of(cms); got != f.rec {
		t.Errorf("New's kind's part: %+v", got)
	}
	if got := f.of(secrets); got != (rangeRecord{token: 5, position: 8, version: 9, by: "b:2#y"}) {
		t.Errorf("the secrets' part: %+v", got)
	}
	if got := f.of(pods); got.position != 0 || got.version != 0 {
		t.Errorf("a kind the record lacks: %+v, want no position", got)
	}
}

// twoMembersLeases is a fake clientset that keeps Leases as the API
// server does, and the leases of group g's members a#1 and b#1 in it.
func twoMembersLeases() (*fake.Clientset, *leases, *leases) {
	cs := fake.NewClientset()
	shardtest.InstallLeases(cs)
	a := newLeases(cs.CoordinationV1(), "default", "g", "a#1", "addr", 15*time.Second, 10*time.Second)
	b := newLeases(cs.CoordinationV1(), "default", "g", "b#1", "addr", 15*time.Second, 10*time.Second)
	return cs, a, b
}

// writeFinal writes range index's final position, as a release would.
func writeFinal(t *testing.T, l *leases, index int, final rangeRecord) {
	t.Helper()
	if _, err := l.casRecords(context.Background(), func(cur *coordinationv1.Lease) (bool, error) {
		e, err := entryOf(cur, index)
		e.gen, e.final = e.gen+1, final
		cur.Annotations[rangeKey(index)] = e.encode()
		return true, err
	}); err != nil {
		t.Fatal(err)
	}
}

// A release writes the range's record, with no holder, its final position
// and the newest version its handlers were given, before the core hears of
// the release (RangeStopped), so before any member can hear of it.
func TestReleaseWritesTheRecordFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig, h := newLoggedRig(t, time.Hour)
		rig.start()
		w := <-rig.watches
		rig.io.rangeEffect(&handover.ActivateRange{Range: 0, Epoch: 1, Token: 9})
		if in := <-rig.reports; in != nil {
			t.Fatalf("report %T, want the activation's", in)
		}
		if res, _, err := rig.inc.leases.claimRecords(context.Background(), []handover.RecordClaim{{Range: 0}}, rig.inc.id); err != nil || !res[0].OK {
			t.Fatalf("claim: %+v, %v", res, err)
		}
		w.Add(cmAt("d", "ud", "15"))
		synctest.Wait()
		if _, found, _ := rig.inc.leases.readRecord(context.Background(), 0); found {
			t.Fatal("a record before any release")
		}
		rig.io.rangeEffect(&handover.DeactivateRange{Range: 0, Epoch: 1, To: "node-c#1"})
		in := <-rig.reports
		stopped, ok := in.(*handover.RangeStopped)
		if !ok || stopped.Unrecorded || stopped.Record == nil || *stopped.Record != (handover.RecordState{Range: 0, Gen: 2, Next: "node-c#1"}) {
			t.Fatalf("report %+v, want RangeStopped with the record, no holder at generation 2", in)
		}
		rec, found, err := rig.inc.leases.readRecord(context.Background(), 0)
		if err != nil || !found {
			t.Fatalf("no record when the release was reported (err %v)", err)
		}
		if rec.token != 9 || rec.position < 15 || rec.version != 15 {
			t.Fatalf("record %+v: want token 9, position 15 or more, version 15", rec)
		}
		if got := h.get(); !slices.Contains(got, "add ns/d@15") {
			t.Fatalf("calls %v: the handlers were not given ns/d before the release", got)
		}
		rig.stop()
		time.Sleep(time.Minute) // the actor system's dead-letter throttle
	})
}

// A release whose record write fails reports it (Unrecorded) and keeps its
// final position; ReleaseRecord writes that position later, and reports
// the record then. Until then the record names this member, without it.
func TestFailedReleaseWriteIsWrittenAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig, _ := newLoggedRig(t, time.Hour)
		rig.start()
		w := <-rig.watches
		if res, _, err := rig.inc.leases.claimRecords(context.Background(), []handover.RecordClaim{{Range: 0}}, rig.inc.id); err != nil || !res[0].OK {
			t.Fatalf("claim: %+v, %v", res, err)
		}
		rig.activateFrom(rangeRecord{})
		if in := <-rig.reports; in != nil {
			t.Fatalf("report %T, want the activation's", in)
		}
		w.Add(cmAt("d", "ud", "15"))
		synctest.Wait()
		var down atomic.Bool
		down.Store(true)
		rig.cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
			if l, ok := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease); ok && l.Name == recordsName("g") && down.Load() {
				return true, nil, errors.New("the API server is cut off")
			}
			return false, nil, nil
		})
		rig.io.rangeEffect(&handover.DeactivateRange{Range: 0, Epoch: 1, To: "node-c#1"})
		if in, ok := (<-rig.reports).(*handover.RangeStopped); !ok || !in.Unrecorded || in.Record != nil {
			t.Fatalf("report %+v, want RangeStopped, unrecorded", in)
		}
		pending := rig.pending.Load()
		if pending == nil || pending.to != "node-c#1" || pending.rec.token != 7 || pending.rec.version != 15 {
			t.Fatalf("kept release %+v, want token 7 and version 15, for node-c#1", pending)
		}
		if _, found, _ := rig.inc.leases.readRecord(context.Background(), 0); found {
			t.Fatal("a final position in the record though its write failed")
		}
		// Written again while the API server is still cut off: unrecorded
		// again; then once it is back: the record.
		rig.io.unrecorded = map[int]*pendingRelease{0: pending}
		rig.io.rangeEffect(&handover.ReleaseRecord{Range: 0, Epoch: 1})
		if in, ok := (<-rig.reports).(*handover.RangeStopped); !ok || !in.Unrecorded {
			t.Fatalf("report %+v, want RangeStopped, unrecorded", in)
		}
		down.Store(false)
		rig.io.rangeEffect(&handover.ReleaseRecord{Range: 0, Epoch: 1})
		in, ok := (<-rig.reports).(*handover.RangeStopped)
		if !ok || in.Unrecorded || in.Record == nil || *in.Record != (handover.RecordState{Range: 0, Gen: 2, Next: "node-c#1"}) {
			t.Fatalf("report %+v, want RangeStopped with the record, no holder at generation 2", in)
		}
		if rec, found, err := rig.inc.leases.readRecord(context.Background(), 0); err != nil || !found || rec.token != 7 || rec.version != 15 {
			t.Fatalf("record %+v (found %v, err %v): want token 7, version 15", rec, found, err)
		}
		// Once taken over (the record names none), nothing is written.
		rig.io.rangeEffect(&handover.ReleaseRecord{Range: 0, Epoch: 1})
		if in, ok := (<-rig.reports).(*handover.RangeStopped); !ok || in.Unrecorded || in.Record != nil {
			t.Fatalf("report %+v, want RangeStopped with nothing written", in)
		}
		rig.stop()
		time.Sleep(time.Minute) // the actor system's dead-letter throttle
	})
}

// readRecord reads range index's final position (a direct read, not a
// watch's copy). found is false when it has none; a malformed one is an
// error.
func (l *leases) readRecord(ctx context.Context, index int) (rec rangeRecord, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	cur, err := l.client.Leases(l.namespace).Get(ctx, recordsName(l.group), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return rangeRecord{}, false, nil
	case err != nil:
		return rangeRecord{}, false, err
	}
	e, err := entryOf(cur, index)
	return e.final, err == nil && e.final.token > 0, err
}

// A records write starts from the records watch's copy: a claim at the
// generation the watch shows is one request (an update). A copy that is
// behind costs a read: its update meets a conflict, and a claim it would
// refuse, or a release it would skip, is judged again on a fresh read.
func TestRecordWritesStartFromTheWatchedCopy(t *testing.T) {
	ctx := context.Background()
	cs, a, b := twoMembersLeases()
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	a.watched.Store(&store)
	// watch copies the records object as it is now into the store.
	watch := func() {
		l, err := cs.CoordinationV1().Leases("default").Get(ctx, recordsName("g"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Update(l); err != nil {
			t.Fatal(err)
		}
		cs.ClearActions()
	}
	verbs := func() []string {
		var out []string
		for _, act := range cs.Actions() {
			out = append(out, act.GetVerb())
		}
		cs.ClearActions()
		return out
	}
	// No copy yet: a read, then the create.
	if res, _, err := a.claimRecords(ctx, []handover.RecordClaim{{Range: 0}}, "a#1"); err != nil || !res[0].OK {
		t.Fatal(res, err)
	}
	if got := verbs(); !slices.Equal(got, []string{"get", "create"}) {
		t.Fatalf("first claim's requests: %v, want get, create", got)
	}
	watch()
	if res, _, err := a.claimRecords(ctx, []handover.RecordClaim{{Range: 1}}, "a#1"); err != nil || !res[0].OK {
		t.Fatal(res, err)
	}
	if got := verbs(); !slices.Equal(got, []string{"update"}) {
		t.Fatalf("a claim on a current copy: %v, want one update", got)
	}
	// The copy is behind a's own claim of range 1: the update meets a
	// conflict, the read finds the object, the update lands.
	if res, _, err := a.claimRecords(ctx, []handover.RecordClaim{{Range: 2}}, "a#1"); err != nil || !res[0].OK {
		t.Fatal(res, err)
	}
	if got := verbs(); !slices.Equal(got, []string{"update", "get", "update"}) {
		t.Fatalf("a claim on a copy behind: %v, want update, get, update", got)
	}
	watch()
	// b claims range 3 and releases it; a's copy does not show it, so
	// a's claim at the generation b's release wrote is refused by the
	// copy, then written on the read.
	if res, _, err := b.claimRecords(ctx, []handover.RecordClaim{{Range: 3}}, "b#1"); err != nil || !res[0].OK {
		t.Fatal(res, err)
	}
	final := rangeRecord{token: 5, position: 50, version: 49, by: "b#1"}
	if rec, err := b.releaseRecord(ctx, 3, final, nil, "b#1", "a#1"); err != nil || rec == nil {
		t.Fatal(rec, err)
	}
	cs.ClearActions()
	res, finals, err := a.claimRecords(ctx, []handover.RecordClaim{{Range: 3, Gen: 2}}, "a#1")
	if err != nil || !res[0].OK || !reflect.DeepEqual(finals[3], claimedFinal{rec: final}) {
		t.Fatalf("a claim the copy would refuse: %+v, %+v, %v; want written, with b's final position", res, finals, err)
	}
	if got := verbs(); !slices.Equal(got, []string{"get", "update"}) {
		t.Fatalf("a claim the copy would refuse: %v, want get, update", got)
	}
	// a's release of range 3, which its copy does not show it holding:
	// read, then written.
	if rec, err := a.releaseRecord(ctx, 3, rangeRecord{token: res[0].Token, position: 60, by: "a#1"}, nil, "a#1", ""); err != nil || rec == nil {
		t.Fatalf("a release the copy would skip: %+v, %v", rec, err)
	}
	if got := verbs(); !slices.Equal(got, []string{"get", "update"}) {
		t.Fatalf("a release the copy would skip: %v, want get, update", got)
	}
}
