package shard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/shardtest"
)

// A lease's ends: a revoke releases it at the version seen unchanged (and
// not at another); its holder can then neither renew nor create it; a
// check tells a released lease from a tombstone; a holder's own release
// marks it too; a lease deleted by someone is not taken as revoked, and
// its holder's release puts a released one in its place.
func TestLeaseReleaseRevokeAndCheck(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	shardtest.InstallLeases(cs)
	of := func(self handover.MemberID) *leases {
		return newLeases(cs.CoordinationV1(), "default", "g", self, "addr-"+string(self), 2*time.Second, time.Second)
	}
	a, b := of("a#1"), of("b#2")
	tok, err := a.write(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if tok2, err := a.write(ctx, false); err != nil || tok2 <= tok {
		t.Fatalf("renewal: token %d after %d, err %v", tok2, tok, err)
	}
	if found, released, v, err := b.check(ctx, "a#1"); err != nil || !found || released || v != a.version {
		t.Fatalf("check of a live lease: found %v, released %v, version %q (want %q), err %v", found, released, v, a.version, err)
	}
	if ok, err := b.revoke(ctx, "a#1", "1"); ok || err != nil {
		t.Fatalf("revoke at another version: ok %v, err %v", ok, err)
	}
	if ok, err := b.revoke(ctx, "a#1", a.version); !ok || err != nil {
		t.Fatalf("revoke at the version: ok %v, err %v", ok, err)
	}
	l, err := cs.CoordinationV1().Leases("default").Get(ctx, leaseName("g", "a#1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder(l) != "" || l.Annotations[AnnotationReleased] != "b#2" || l.Annotations[AnnotationMember] != "a#1" {
		t.Fatalf("revoked lease: holder %q, annotations %v", holder(l), l.Annotations)
	}
	if _, err := a.write(ctx, false); err != errLost {
		t.Fatalf("renewal of a revoked lease: %v, want errLost", err)
	}
	if _, err := a.write(ctx, true); err != errLost {
		t.Fatalf("create over a revoked lease: %v, want errLost", err)
	}
	if found, released, _, err := b.check(ctx, "a#1"); err != nil || found || !released {
		t.Fatalf("check of a revoked lease: found %v, released %v, err %v", found, released, err)
	}
	if found, released, _, err := b.check(ctx, "c#3"); err != nil || found || released {
		t.Fatalf("check of a lease never written: found %v, released %v, err %v (want a tombstone)", found, released, err)
	}
	if _, err := of("c#3").write(ctx, true); err != errLost {
		t.Fatalf("create over a tombstone: %v, want errLost", err)
	}

	// The holder's own release.
	d := of("d#4")
	if _, err := d.write(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := d.release(ctx); err != nil {
		t.Fatal(err)
	}
	if found, released, _, err := b.check(ctx, "d#4"); err != nil || found || !released {
		t.Fatalf("check of a released lease: found %v, released %v, err %v", found, released, err)
	}

	// Deleted by someone outside the group: a revoke does not count it.
	e := of("e#5")
	if _, err := e.write(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoordinationV1().Leases("default").Delete(ctx, leaseName("g", "e#5"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.revoke(ctx, "e#5", e.version); ok || err != nil {
		t.Fatalf("revoke of a deleted lease: ok %v, err %v, want not ok", ok, err)
	}
	if _, err := e.write(ctx, false); err != errLost {
		t.Fatalf("renewal of a deleted lease: %v, want errLost", err)
	}
	// e stops: its release puts a released lease in the deleted one's place.
	if err := e.release(ctx); err != nil {
		t.Fatal(err)
	}
	if found, released, _, err := b.check(ctx, "e#5"); err != nil || found || !released {
		t.Fatalf("check after the release of a deleted lease: found %v, released %v, err %v", found, released, err)
	}

	// What the core is shown: b's live lease; a's, d's and e's released;
	// c's tombstone only to delete once old.
	if _, err := b.write(ctx, true); err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs := make([]any, 0, len(list.Items))
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	addrs := map[handover.MemberID]string{}
	snap := leasesOf(objs, addrs)
	if len(snap.Leases) != 1 || snap.Leases[0].Holder != "b#2" || snap.Leases[0].Version != b.version || addrs["b#2"] != "addr-b#2" {
		t.Errorf("live leases %+v (addresses %v), want b#2's at %s", snap.Leases, addrs, b.version)
	}
	slices.Sort(snap.Released)
	if !slices.Equal(snap.Released, []handover.MemberID{"a#1", "d#4", "e#5"}) {
		t.Errorf("released %v, want a#1, d#4 and e#5", snap.Released)
	}
	if len(snap.Stale) != 4 {
		t.Errorf("%d tombstones and released leases, want 4", len(snap.Stale))
	}
	// The core deletes one it saw unchanged long enough: only at the
	// version it saw.
	stale := snap.Stale[0]
	b.deleteStale(ctx, stale.Name, "1")
	if _, err := cs.CoordinationV1().Leases("default").Get(ctx, stale.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("a delete at another version removed %s: %v", stale.Name, err)
	}
	b.deleteStale(ctx, stale.Name, stale.Version)
	if _, err := cs.CoordinationV1().Leases("default").Get(ctx, stale.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s after its delete: %v, want not found", stale.Name, err)
	}
}

// A request's warning names the line that made it, not warn's, and says
// nothing once the incarnation ends.
func TestWarnNamesItsCaller(t *testing.T) {
	var buf bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	inc := &incarnation{ctx: ctx, log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{AddSource: true}))}
	_, _, line, _ := runtime.Caller(0)
	inc.warn(errors.New("boom"), "the lease write failed", "of", "m1")
	want := fmt.Sprintf("lease_internal_test.go:%d", line+1)
	if out := buf.String(); !strings.Contains(out, want) || !strings.Contains(out, "err=boom") || !strings.Contains(out, "of=m1") {
		t.Errorf("logged %q, want the source %s, of=m1 and err=boom", out, want)
	}
	buf.Reset()
	inc.warn(nil, "no error")
	cancel()
	inc.warn(errors.New("late"), "after the end")
	if buf.Len() > 0 {
		t.Errorf("logged %q without an error or after the end", buf.String())
	}
}

// A renewal whose previous write landed with its answer lost meets a
// conflict: the lease is read again, and written again while it is still
// this member's, with a token past the landed write's.
func TestLeaseRenewalAfterALostAnswer(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	shardtest.InstallLeases(cs)
	a := newLeases(cs.CoordinationV1(), "default", "g", "a#1", "addr-a", 2*time.Second, time.Second)
	if _, err := a.write(ctx, true); err != nil {
		t.Fatal(err)
	}
	api := cs.CoordinationV1().Leases("default")
	l, err := api.Get(ctx, leaseName("g", "a#1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	landed, err := api.Update(ctx, l, metav1.UpdateOptions{}) // the write whose answer was lost
	if err != nil {
		t.Fatal(err)
	}
	tok, err := a.write(ctx, false)
	if err != nil {
		t.Fatalf("renewal after a landed write: %v", err)
	}
	if v := fmt.Sprint(tok); v == landed.ResourceVersion || a.version != v {
		t.Fatalf("renewal: token %d, version %q; the landed write's version %q", tok, a.version, landed.ResourceVersion)
	}
	if got, err := api.Get(ctx, l.Name, metav1.GetOptions{}); err != nil || holder(got) != "a#1" || got.ResourceVersion != a.version {
		t.Fatalf("the lease after the renewal: %v, %v; want a#1's at %q", got, err, a.version)
	}
}
