package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// Range records (docs/sharding.md, "Range records"): one Lease per group
// (recordsName), an annotation per range ever delivered (recordEntry). A
// claim is a compare-and-swap on the generation the core knows
// (claimRecords); a release writes the record before it reports the
// release, and only while the record still names this member
// (releaseRecord). The object is labelled apart from the member leases
// (LabelRecordOf), so that the lease watch and its tombstone collection
// never see it.
const (
	// LabelRecordOf labels the range records of a group, with the
	// group's label value.
	LabelRecordOf = "actorinformer.io/shard-record-of"
	// annotationRangePrefix starts the annotation of range i's record:
	// "actorinformer.io/shard-range-<i>", whose value is a JSON object
	// (recordEntry's fields).
	annotationRangePrefix = "actorinformer.io/shard-range-"
)

// rangeRecord is a range's final position: what the handlers of delivery
// token, member by's, had been given when it released the range.
type rangeRecord struct {
	token    uint64
	position int64 // every event up to it
	version  int64 // the newest object version given
	by       handover.MemberID
}

// kindFinal is a kind's part of a range's final position, for the kinds
// after New's (whose part is rangeRecord's own): what the delivery's
// handlers of that kind had been given.
type kindFinal struct {
	Position int64 `json:"p"`
	Version  int64 `json:"v,omitempty"`
}

// kindFinals are the kinds' parts, by kind key.
type kindFinals map[string]kindFinal

// pos is the record's position.
func (r rangeRecord) pos() position { return position{token: r.token, version: r.position} }

// recordEntry is one range's record; next is the member its last release
// was for; kinds the other kinds' parts of its final position.
type recordEntry struct {
	gen          uint64
	holder, next handover.MemberID
	final        rangeRecord
	kinds        kindFinals
}

// entryJSON is a record's annotation.
type entryJSON struct {
	Gen      uint64 `json:"gen"`
	Holder   string `json:"holder,omitempty"`
	Next     string `json:"next,omitempty"`
	By       string `json:"by,omitempty"`
	Token    uint64 `json:"token,omitempty"`
	Position int64  `json:"position,omitempty"`
	Version  int64  `json:"version,omitempty"`
	// Kinds: a group of several kinds's (AddKind).
	Kinds kindFinals `json:"kinds,omitempty"`
}

func (e recordEntry) encode() string {
	b, _ := json.Marshal(entryJSON{Gen: e.gen, Holder: string(e.holder), Next: string(e.next), By: string(e.final.by),
		Token: e.final.token, Position: e.final.position, Version: e.final.version, Kinds: e.kinds})
	return string(b)
}

func decodeEntry(s string) (recordEntry, error) {
	var j entryJSON
	if err := json.Unmarshal([]byte(s), &j); err != nil || j.Gen == 0 || j.Position < 0 || j.Version < 0 {
		return recordEntry{}, fmt.Errorf("shard: malformed range record %q", s)
	}
	for _, k := range j.Kinds {
		if k.Position < 0 || k.Version < 0 {
			return recordEntry{}, fmt.Errorf("shard: malformed range record %q", s)
		}
	}
	return recordEntry{gen: j.Gen, holder: handover.MemberID(j.Holder), next: handover.MemberID(j.Next),
		final: rangeRecord{token: j.Token, position: j.Position, version: j.Version, by: handover.MemberID(j.By)}, kinds: j.Kinds}, nil
}

// recordsName is the name of group's records object.
func recordsName(group string) string {
	return fmt.Sprintf("aishard-%s-ranges-%s", groupPart(group), hash16(group)[:8])
}

func rangeKey(index int) string { return annotationRangePrefix + strconv.Itoa(index) }

// entryOf is range index's record in l (none, generation 0, when l is nil
// or has none). A malformed one is an error.
func entryOf(l *coordinationv1.Lease, index int) (recordEntry, error) {
	if l == nil {
		return recordEntry{}, nil
	}
	s, ok := l.Annotations[rangeKey(index)]
	if !ok {
		return recordEntry{}, nil
	}
	return decodeEntry(s)
}

// recordStates are the records in l of ranges below ranges, for the core;
// malformed ones are left out and returned as errors.
func recordStates(l *coordinationv1.Lease, ranges int) ([]handover.RecordState, []error) {
	var out []handover.RecordState
	var bad []error
	for r := range ranges {
		e, err := entryOf(l, r)
		switch {
		case err != nil:
			bad = append(bad, err)
		case e.gen > 0:
			out = append(out, handover.RecordState{Range: r, Holder: e.holder, Gen: e.gen, Next: e.next})
		}
	}
	return out, bad
}

// recordTries bounds a records write's compare-and-swap rounds (each a read
// and a write) when other members keep changing the object.
const recordTries = 8

// claimRecords writes the records claims claim, naming member self: each
// only if it is still at the claim's generation, all in one write. Every
// claim gets a result: written (OK, with the write's resourceVersion as its
// token, and finals has the range's final position, which only the release
// of the delivery the claim begins can change), refused (the record as it
// is), or failed (err: the write may or may not have landed). A written
// claim's final also names the holder the claim replaced (a takeover: the
// range's last deliverer, if it began delivering).
func (l *leases) claimRecords(ctx context.Context, claims []handover.RecordClaim, self handover.MemberID) (res []handover.ClaimResult, finals map[int]claimedFinal, err error) {
	res = make([]handover.ClaimResult, len(claims))
	rv, err := l.casRecords(ctx, func(cur *coordinationv1.Lease) (bool, error) {
		wrote := false
		finals = map[int]claimedFinal{}
		for i, cl := range claims {
			e, err := entryOf(cur, cl.Range)
			if err != nil {
				return false, err
			}
			res[i] = handover.ClaimResult{Range: cl.Range, Epoch: cl.Epoch}
			if e.gen == cl.Gen {
				f := claimedFinal{rec: e.final, kinds: e.kinds}
				if e.holder != self {
					f.replaced = e.holder
				}
				e.gen, e.holder, wrote = e.gen+1, self, true
				cur.Annotations[rangeKey(cl.Range)] = e.encode()
				res[i].OK = true
				finals[cl.Range] = f
			}
			res[i].Record = handover.RecordState{Range: cl.Range, Holder: e.holder, Gen: e.gen, Next: e.next}
		}
		return wrote, nil
	})
	if err != nil {
		for i, cl := range claims {
			res[i] = handover.ClaimResult{Range: cl.Range, Epoch: cl.Epoch}
		}
		return res, nil, err
	}
	for i := range res {
		if res[i].OK {
			res[i].Token = rv
		}
	}
	return res, finals, nil
}

// releaseRecord writes range index's record at a release by member self
// for member next ("" for none): no holder, and final (with the other
// kinds' parts, kinds) as its final position, if the record still names
// self (nil, nil when it does not: the range was taken over).
func (l *leases) releaseRecord(ctx context.Context, index int, final rangeRecord, kinds kindFinals, self, next handover.MemberID) (*handover.RecordState, error) {
	var out *handover.RecordState
	_, err := l.casRecords(ctx, func(cur *coordinationv1.Lease) (bool, error) {
		e, err := entryOf(cur, index)
		if err != nil || e.holder != self {
			out = nil
			return false, err
		}
		e.gen, e.holder, e.next, e.final, e.kinds = e.gen+1, "", next, final, kinds
		cur.Annotations[rangeKey(index)] = e.encode()
		out = &handover.RecordState{Range: index, Gen: e.gen, Next: next}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// casRecords changes the group's records object by compare-and-swap: a
// read, change (which says whether to write), then a create, or an update
// carrying the version read (409 Conflict when someone wrote meanwhile:
// read again). The first read is the records watch's copy when it has
// one (l.watched): a claim's generation comes from it, so its update
// usually lands at once; change is trusted to write nothing only on a
// copy just read from the server. Each request within the renew deadline.
// It returns the object's resourceVersion after the write as a number (0
// when change wrote nothing).
func (l *leases) casRecords(ctx context.Context, change func(*coordinationv1.Lease) (bool, error)) (uint64, error) {
	api := l.client.Leases(l.namespace)
	name := recordsName(l.group)
	watched := l.watchedRecords()
	for range recordTries {
		rctx, cancel := context.WithTimeout(ctx, l.timeout)
		cur, err, fromWatch := watched, error(nil), watched != nil
		watched = nil
		if !fromWatch {
			cur, err = api.Get(rctx, name, metav1.GetOptions{})
		}
		create := apierrors.IsNotFound(err)
		if create {
			cur, err = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.namespace,
				Labels: map[string]string{LabelRecordOf: l.group}}}, nil
		}
		var done *coordinationv1.Lease
		if err == nil {
			cur = cur.DeepCopy()
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			var write bool
			if write, err = change(cur); err != nil || !write {
				cancel()
				if fromWatch {
					continue // judged on a copy that may be behind: read it
				}
				return 0, err
			}
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
			tok, perr := strconv.ParseUint(done.ResourceVersion, 10, 64)
			if perr != nil {
				return 0, fmt.Errorf("range records %s: resourceVersion %q is not a number: fencing tokens need one", name, done.ResourceVersion)
			}
			return tok, nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return 0, err
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
	return 0, fmt.Errorf("range records %s kept changing", name)
}

// watchedRecords is the records object as the member's records watch has
// it (nil: none yet, or no watch).
func (l *leases) watchedRecords() *coordinationv1.Lease {
	st := l.watched.Load()
	if st == nil {
		return nil
	}
	obj, _, _ := (*st).GetByKey(l.namespace + "/" + recordsName(l.group))
	cur, _ := obj.(*coordinationv1.Lease)
	return cur
}
