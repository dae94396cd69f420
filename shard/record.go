package shard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// Range records. Each range of a group has a record in the API server, a
// coordination.k8s.io/v1 Lease named after the group and the range, that
// holds the range's final position: the token of the last delivery that
// released the range, the resourceVersion up to which that delivery's
// handlers were given every event of it, and the newest object version
// they were given. A member writes it when it releases the range, after
// its handlers' calls have ended and before it reports the release (so
// before any member hears the range was released), by compare-and-swap:
// an update that carries the resourceVersion it read, which never
// replaces a newer token's position. A member that activates the range
// reads it, and resumes from the newest position of it, the previous
// deliverer's answer and the leases'. So what the previous deliverer's
// handlers were given is data that outlives the member and its messages:
// an answer that is lost, or that reached a member whose claim was given
// up, loses nothing.
//
// A release's write also names the member the range is released to (the
// record's holder; none when it goes to no one), and that write's
// resourceVersion is that member's fencing token when it takes the range
// for the ask it was released for: no write of its own comes between the
// old owner's last call and the new one's first.
//
// The records are labelled apart from the member leases (LabelRecordOf),
// so that the lease watch and its tombstone collection never see them.
const (
	// LabelRecordOf labels the range records of a group, with the
	// group's label value.
	LabelRecordOf = "actorinformer.io/shard-record-of"
	// AnnotationRecord is a record's content: "token:position:version".
	AnnotationRecord = "actorinformer.io/shard-final"
	// AnnotationRecordRange is the range the record is of.
	AnnotationRecordRange = "actorinformer.io/shard-range"
)

// rangeRecord is a range's final position: what the handlers of delivery
// token had been given when it released the range.
type rangeRecord struct {
	token    uint64
	position int64 // every event up to it
	version  int64 // the newest object version given
}

func (r rangeRecord) encode() string {
	return fmt.Sprintf("%d:%d:%d", r.token, r.position, r.version)
}

func decodeRecord(s string) (rangeRecord, error) {
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return rangeRecord{}, fmt.Errorf("shard: malformed range record %q in %s", s, AnnotationRecord)
	}
	t, err1 := strconv.ParseUint(f[0], 10, 64)
	p, err2 := strconv.ParseInt(f[1], 10, 64)
	v, err3 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || p < 0 || v < 0 {
		return rangeRecord{}, fmt.Errorf("shard: malformed range record %q in %s", s, AnnotationRecord)
	}
	return rangeRecord{token: t, position: p, version: v}, nil
}

// pos is the record's position.
func (r rangeRecord) pos() position { return position{token: r.token, version: r.position} }

// recordName is the name of range index's record in group.
func recordName(group string, index int) string {
	return fmt.Sprintf("aishard-%s-r%d-%s", groupPart(group), index, hash16(group)[:8])
}

// recordTries bounds a record write's compare-and-swap rounds (each a read
// and a write) when other writers keep changing it.
const recordTries = 5

// writeRecord writes rec as range index's record at a release, naming
// next as the range's holder ("": none), unless the record holds a newer
// delivery's (or the same) position already. It returns the record's
// resourceVersion after the write (0 when it wrote nothing): next's claim
// of the range, and its token.
func (l *leases) writeRecord(ctx context.Context, index int, rec rangeRecord, next handover.MemberID) (uint64, error) {
	rv, err := l.casRecord(ctx, index, func(cur *coordinationv1.Lease) bool {
		if old, derr := decodeRecord(cur.Annotations[AnnotationRecord]); derr == nil && !rec.pos().newer(old.pos()) {
			return false // a newer delivery's, or this one's already
		}
		cur.Annotations[AnnotationRecord] = rec.encode()
		cur.Spec.HolderIdentity = nil
		if next != "" {
			h := string(next)
			cur.Spec.HolderIdentity = &h
		}
		return true
	})
	if err != nil || rv == "" {
		return 0, err
	}
	tok, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("range record %s: resourceVersion %q is not a number: fencing tokens need one", recordName(l.group, index), rv)
	}
	return tok, nil
}

// casRecord changes range index's record by compare-and-swap: a read,
// change (which says whether to write), then a create, or an update
// carrying the version read (409 Conflict when someone wrote meanwhile:
// read again). Each request within the renew deadline. It returns the
// record's resourceVersion after the write ("" when change wrote nothing).
func (l *leases) casRecord(ctx context.Context, index int, change func(*coordinationv1.Lease) bool) (string, error) {
	api := l.client.Leases(l.namespace)
	name := recordName(l.group, index)
	for range recordTries {
		rctx, cancel := context.WithTimeout(ctx, l.timeout)
		cur, err := api.Get(rctx, name, metav1.GetOptions{})
		create := apierrors.IsNotFound(err)
		if create {
			cur, err = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.namespace,
				Labels: map[string]string{LabelRecordOf: groupLabel(l.group)}}}, nil
		}
		var done *coordinationv1.Lease
		if err == nil {
			cur = cur.DeepCopy()
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			if !change(cur) {
				cancel()
				return "", nil
			}
			cur.Annotations[AnnotationRecordRange] = strconv.Itoa(index)
			now := metav1.NewMicroTime(time.Now())
			cur.Spec.RenewTime = &now
			if create {
				done, err = api.Create(rctx, cur, metav1.CreateOptions{})
			} else {
				done, err = api.Update(rctx, cur, metav1.UpdateOptions{})
			}
		}
		cancel()
		if err == nil {
			return done.ResourceVersion, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
	}
	return "", fmt.Errorf("range record %s kept changing", name)
}

// readRecord reads range index's record (a direct read, not a watch's
// copy). found is false when it has none; a malformed one is an error.
func (l *leases) readRecord(ctx context.Context, index int) (rec rangeRecord, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	cur, err := l.client.Leases(l.namespace).Get(ctx, recordName(l.group, index), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return rangeRecord{}, false, nil
	case err != nil:
		return rangeRecord{}, false, err
	}
	rec, err = decodeRecord(cur.Annotations[AnnotationRecord])
	return rec, err == nil, err
}
