package shard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// A member incarnation's lease (docs/sharding.md, "Leases") is written
// with client-go's resourcelock.LeaseLock (leaseName) and holds the
// member's id (HolderIdentity) and address (AnnotationAddress). A Lease of
// a member's name with no holder is a tombstone, which keeps the member
// from ever creating its lease, or released (AnnotationReleased): void at
// once. A deleted lease is void only a lease duration later, since its
// holder may not know yet.
const (
	// LabelGroup labels the leases of a group.
	LabelGroup = "actorinformer.io/shard-group"
	// AnnotationMember and AnnotationAddress say whose lease it is and
	// where that member's group actor listens.
	AnnotationMember  = "actorinformer.io/shard-member"
	AnnotationAddress = "actorinformer.io/shard-address"
	// AnnotationProtocol is the protocol version of the lease's holder
	// (none: protocol 2 or earlier, whose deliveries the range records do
	// not show).
	AnnotationProtocol = "actorinformer.io/shard-protocol"
	// AnnotationReleased marks a released lease; its value is the member
	// that released it (the holder, or its revoker).
	AnnotationReleased = "actorinformer.io/shard-released-by"
)

var dnsUnsafe = regexp.MustCompile(`[^a-z0-9-]+`)

// hash16 is s's Hash in 16 hex digits, for object names.
func hash16(s string) string { return fmt.Sprintf("%016x", Hash(s)) }

// groupPart is group as the part of an object name: lower case, DNS-safe,
// at most 30 characters (the names add a hash of the whole).
func groupPart(group string) string {
	g := strings.Trim(dnsUnsafe.ReplaceAllString(strings.ToLower(group), "-"), "-")
	if len(g) > 30 {
		g = g[:30]
	}
	return g
}

// leaseName is the name of member m's lease in group.
func leaseName(group string, m handover.MemberID) string {
	return "aishard-" + groupPart(group) + "-" + hash16(group+"\x00"+string(m))
}

// leases is a member's client of the group's leases: its own, written with
// a resourcelock.LeaseLock, and the others', read and revoked.
type leases struct {
	// mu serialises the writes of this member's lease (a renewal may still
	// run when the member leaves).
	mu        sync.Mutex
	client    coordinationv1client.LeasesGetter
	namespace string
	group     string
	self      handover.MemberID
	duration  time.Duration
	timeout   time.Duration // of each request: the renew deadline
	lock      *resourcelock.LeaseLock
	rec       *versionRecorder
	acquired  time.Time
	// version is the resourceVersion of this member's last write.
	version string
	// watched: the store of the member's records watch, once it runs
	// (casRecords' first read).
	watched atomic.Pointer[cache.Store]
}

func newLeases(client coordinationv1client.LeasesGetter, namespace, group string, self handover.MemberID, address string, duration, timeout time.Duration) *leases {
	rec := &versionRecorder{inner: client, annotations: map[string]string{AnnotationMember: string(self), AnnotationAddress: address,
		AnnotationProtocol: strconv.Itoa(protocolVersion)}}
	l := &leases{client: client, namespace: namespace, group: group, self: self, duration: duration, timeout: timeout, rec: rec}
	l.lock = &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: leaseName(group, self), Namespace: namespace},
		Client:     rec,
		LockConfig: resourcelock.ResourceLockConfig{Identity: string(self)},
		Labels:     map[string]string{LabelGroup: group},
	}
	return l
}

func (l *leases) record(now time.Time) resourcelock.LeaderElectionRecord {
	if l.acquired.IsZero() {
		l.acquired = now
	}
	return resourcelock.LeaderElectionRecord{
		HolderIdentity:       string(l.self),
		LeaseDurationSeconds: int(math.Ceil(l.duration.Seconds())),
		AcquireTime:          metav1.NewTime(l.acquired),
		RenewTime:            metav1.NewTime(now),
	}
}

// errLost: this member's lease is gone, or another's (a tombstone): it
// will never be written again.
var errLost = errors.New("the lease was revoked, or its name is taken")

// write creates or renews this member's lease and returns the fencing
// token: the resourceVersion after the write.
func (l *leases) write(ctx context.Context, create bool) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	now := time.Now()
	var err error
	if create {
		err = l.lock.Create(ctx, l.record(now))
		if apierrors.IsAlreadyExists(err) {
			return 0, errLost // a tombstone: a member decided this one never had a lease
		}
	} else {
		err = l.lock.Update(ctx, l.record(now))
		if apierrors.IsConflict(err) {
			// Our previous write may have landed with its answer lost:
			// read the lease, and write again if it is still ours.
			rec, _, gerr := l.lock.Get(ctx)
			switch {
			case apierrors.IsNotFound(gerr):
				return 0, errLost
			case gerr != nil:
				return 0, gerr
			case rec.HolderIdentity != string(l.self):
				return 0, errLost
			}
			err = l.lock.Update(ctx, l.record(now))
		}
		if apierrors.IsNotFound(err) {
			return 0, errLost
		}
	}
	if err != nil {
		return 0, err
	}
	l.version = l.rec.last
	tok, perr := strconv.ParseUint(l.version, 10, 64)
	if perr != nil {
		return 0, fmt.Errorf("the lease's resourceVersion %q is not a number: fencing tokens need one", l.version)
	}
	return tok, nil
}

// check reads member m's lease; if there is none, it creates a tombstone
// in its place. found: m has a live lease, at version; released: it was
// released.
func (l *leases) check(ctx context.Context, m handover.MemberID) (found, released bool, version string, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	api := l.client.Leases(l.namespace)
	name := leaseName(l.group, m)
	for range 3 {
		cur, err := api.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if holder(cur) == "" {
				return false, cur.Annotations[AnnotationReleased] != "", "", nil
			}
			return true, false, cur.ResourceVersion, nil
		}
		if !apierrors.IsNotFound(err) {
			return false, false, "", err
		}
		stone := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.namespace,
			Labels:      map[string]string{LabelGroup: l.group},
			Annotations: map[string]string{AnnotationMember: string(m), "actorinformer.io/shard-tombstone-by": string(l.self)}}}
		_, err = api.Create(ctx, stone, metav1.CreateOptions{})
		if err == nil {
			return false, false, "", nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return false, false, "", err
		}
		// Created meanwhile: read it again.
	}
	return false, false, "", fmt.Errorf("lease %s keeps changing", name)
}

// revoke releases member m's lease if it is still at version. ok: this
// member released it; not when it changed or is gone (the core reads it
// again).
func (l *leases) revoke(ctx context.Context, m handover.MemberID, version string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	return l.markReleased(ctx, m, version, nil)
}

// markReleased writes member m's lease, if it is at version and held by
// m, as released: no holder, AnnotationReleased, renewTime now, and, from
// its holder (positions set), its final positions. The write carries
// version, so the server refuses it if the lease changed since.
func (l *leases) markReleased(ctx context.Context, m handover.MemberID, version string, positions func() string) (bool, error) {
	api := l.client.Leases(l.namespace)
	cur, err := api.Get(ctx, leaseName(l.group, m), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	case cur.ResourceVersion != version || holder(cur) != string(m):
		return false, nil
	}
	rel := cur.DeepCopy()
	rel.Spec.HolderIdentity = nil
	now := metav1.NewMicroTime(time.Now())
	rel.Spec.RenewTime = &now
	if rel.Annotations == nil {
		rel.Annotations = map[string]string{}
	}
	rel.Annotations[AnnotationMember] = string(m)
	rel.Annotations[AnnotationReleased] = string(l.self)
	if positions != nil {
		rel.Annotations[AnnotationPositions] = mergePositions(rel.Annotations[AnnotationPositions], positions())
	}
	_, err = api.Update(ctx, rel, metav1.UpdateOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return false, nil
	}
	return false, err
}

// release marks this member's lease released, if it is still at the
// version it wrote last: the member calls no handler any more. If someone
// deleted it, a released one takes its place, so that the others need not
// wait a lease duration; if a peer revoked it, or a tombstone holds its
// name, it is released already.
func (l *leases) release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.version == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if ok, err := l.markReleased(ctx, l.self, l.version, l.rec.positions); ok || err != nil {
		return err
	}
	rel := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName(l.group, l.self), Namespace: l.namespace,
		Labels:      map[string]string{LabelGroup: l.group},
		Annotations: map[string]string{AnnotationMember: string(l.self), AnnotationReleased: string(l.self)}}}
	if l.rec.positions != nil {
		if p := l.rec.positions(); p != "" {
			rel.Annotations[AnnotationPositions] = p
		}
	}
	now := metav1.NewMicroTime(time.Now())
	rel.Spec.RenewTime = &now
	_, err := l.client.Leases(l.namespace).Create(ctx, rel, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// deleteStale deletes lease name, a tombstone or a released lease the core
// saw unchanged long enough, if it is still at version. Its outcome shows
// in the lease watch.
func (l *leases) deleteStale(ctx context.Context, name, version string) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	_ = l.client.Leases(l.namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &version}})
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// versionRecorder is the LeasesGetter the LeaseLock writes through: it
// keeps the resourceVersion each write returns (LeaseLock does not say
// it) and gives a created lease the member's annotations.
type versionRecorder struct {
	inner       coordinationv1client.LeasesGetter
	annotations map[string]string
	last        string
	// positions, when set, gives the AnnotationPositions of each write.
	positions func() string
}

// withPositions returns l with its AnnotationPositions set (removed when
// empty), as a copy.
func (v *versionRecorder) withPositions(l *coordinationv1.Lease) *coordinationv1.Lease {
	if v.positions == nil {
		return l
	}
	p := v.positions()
	if l.Annotations[AnnotationPositions] == p {
		return l
	}
	l = l.DeepCopy()
	if p == "" {
		delete(l.Annotations, AnnotationPositions)
		return l
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationPositions] = p
	return l
}

func (v *versionRecorder) Leases(namespace string) coordinationv1client.LeaseInterface {
	return recordingLeases{LeaseInterface: v.inner.Leases(namespace), v: v}
}

type recordingLeases struct {
	coordinationv1client.LeaseInterface
	v *versionRecorder
}

func (r recordingLeases) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	l = l.DeepCopy()
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	maps.Copy(l.Annotations, r.v.annotations)
	return r.keep(r.LeaseInterface.Create(ctx, l, opts))
}

func (r recordingLeases) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return r.keep(r.LeaseInterface.Update(ctx, r.v.withPositions(l), opts))
}

func (r recordingLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	return r.keep(r.LeaseInterface.Get(ctx, name, opts))
}

// keep keeps the resourceVersion of a request's answer, if it succeeded.
func (r recordingLeases) keep(out *coordinationv1.Lease, err error) (*coordinationv1.Lease, error) {
	if err == nil {
		r.v.last = out.ResourceVersion
	}
	return out, err
}
