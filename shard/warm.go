package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/internal/shardpb"
)

// A warm start: a member that acquires a range from the member that
// delivers it starts the range's informer from a copy of that member's
// cache, taken at one resourceVersion, and watches from there: no list.
// The copy travels in chunks over the cluster's remote, as JSON, and
// arrives as new objects. If the copy cannot be had, or the watch finds
// its resourceVersion compacted away (410 Gone), the informer lists, as a
// cold start does.

// snapshotChunk is how many objects a SnapshotChunk carries.
const snapshotChunk = 256

// snapshotTTL is how long a member keeps a copy it took for an asker. A
// var for tests.
var snapshotTTL = time.Minute

// warmStats counts the warm starts and the fallbacks to a list.
type warmStats struct {
	starts, fallbacks atomic.Int64
	// resumes: activations that resumed from a position (replaying the
	// range's changes since it); resumeGaps: those whose replay fell short.
	resumes, resumeGaps atomic.Int64
	// recordFailures: release record writes that failed (each is tried
	// again).
	recordFailures atomic.Int64
	once           sync.Map // reasons already logged
}

// seedList is the list a warm start hands the informer: the copied
// objects, at the copy's resourceVersion.
type seedList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []runtime.Object
}

func (l *seedList) DeepCopyObject() runtime.Object {
	out := &seedList{TypeMeta: l.TypeMeta, ListMeta: *l.ListMeta.DeepCopy(), Items: make([]runtime.Object, len(l.Items))}
	for i, it := range l.Items {
		out.Items[i] = it.DeepCopyObject()
	}
	return out
}

func (l *seedList) GetObjectKind() schema.ObjectKind { return &l.TypeMeta }

// snapshot is a copy of a range's cache kept for an asker's chunks. Its
// objects are dropped snapshotTTL after it was taken, whether or not the
// asker came back for the rest: an asker that gave up (its range moved
// on, a chunk timed out) would otherwise keep them alive, the range's
// cache of that moment beside the live one, until another member asked
// this one for a copy.
type snapshot struct {
	rv string
	at time.Time

	mu    sync.Mutex
	objs  []any // nil once dropped
	timer *time.Timer
}

// newSnapshot keeps objs for snapshotTTL.
func newSnapshot(objs []any, rv string, at time.Time) *snapshot {
	sn := &snapshot{objs: objs, rv: rv, at: at}
	sn.mu.Lock()
	sn.timer = time.AfterFunc(snapshotTTL, sn.drop)
	sn.mu.Unlock()
	return sn
}

// objects returns the copy's objects, nil once dropped.
func (sn *snapshot) objects() []any {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	return sn.objs
}

// drop lets the copy's objects go (its last chunk was served, or its time
// is up).
func (sn *snapshot) drop() {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	sn.objs = nil
	if sn.timer != nil {
		sn.timer.Stop()
	}
}

type snapshotKey struct {
	asker string
	rng   int
	epoch uint64
	kind  string
}

// serveSnapshot answers a SnapshotRequest: on the I/O actor, from the
// range's cache if this member delivers the range or has synced it.
func (io *memberIO) serveSnapshot(ctx actor.Context, m *shardpb.SnapshotRequest) {
	fail := func(why string) {
		ctx.Respond(&shardpb.SnapshotChunk{Range: m.Range, Chunk: m.Chunk, Error: why})
	}
	k := snapshotKey{m.From, int(m.Range), m.Epoch, m.Kind}
	now := time.Now()
	for key, sn := range io.snapshots {
		if now.Sub(sn.at) > snapshotTTL {
			delete(io.snapshots, key)
		}
	}
	sn := io.snapshots[k]
	var objs []any
	if sn != nil {
		objs = sn.objects()
	}
	if m.Chunk == 0 || objs == nil {
		var refused *shardpb.SnapshotChunk
		if sn, refused = io.takeSnapshot(m, k, now); refused != nil {
			ctx.Respond(refused)
			return
		}
		objs = sn.objects()
	}
	from := int(m.Chunk) * snapshotChunk
	if from > len(objs) {
		fail("no such chunk")
		return
	}
	to := min(from+snapshotChunk, len(objs))
	out := &shardpb.SnapshotChunk{Range: m.Range, Chunk: m.Chunk, ResourceVersion: sn.rv, Last: to == len(objs),
		Total: int32(len(objs)), Objects: make([][]byte, 0, to-from)}
	if mode := io.inc.s.kindOf(m.Kind).filter.Mode(); mode != FilterPending {
		out.FilterMode = mode.String()
	}
	for _, obj := range objs[from:to] {
		b, err := json.Marshal(obj)
		if err != nil {
			fail("cannot encode an object: " + err.Error())
			return
		}
		out.Objects = append(out.Objects, b)
	}
	if out.Last {
		sn.drop()
		delete(io.snapshots, k)
	}
	ctx.Respond(out)
}

// takeSnapshot copies the range m asks for, kept under k for the next
// chunks when it takes more than one; or the answer that refuses it.
func (io *memberIO) takeSnapshot(m *shardpb.SnapshotRequest, k snapshotKey, now time.Time) (*snapshot, *shardpb.SnapshotChunk) {
	fail := func(why string) (*snapshot, *shardpb.SnapshotChunk) {
		return nil, &shardpb.SnapshotChunk{Range: m.Range, Chunk: m.Chunk, Error: why}
	}
	ri := io.ranges[int(m.Range)]
	// A range it delivers, or one whose informer has synced (it is
	// taking the range, or giving it away): either cache is the
	// range's at one resourceVersion.
	kind := io.inc.s.kindOf(m.Kind)
	if kind == nil {
		return fail("this member's group has no kind " + m.Kind)
	}
	var kr *kindRange
	if ri != nil {
		kr = ri.of(kind)
	}
	if ri == nil || !ri.delivering.Load() && !kr.inf.HasSynced() {
		if to, ok := io.movedTo[int(m.Range)]; ok && string(to) != m.From {
			// Released since the asker named this member: the member it
			// went to has a synced copy.
			return nil, &shardpb.SnapshotChunk{Range: m.Range, Chunk: m.Chunk, Error: "the range was released to " + string(to),
				MovedTo: string(to), MovedToAddress: io.address(to)}
		}
		return fail("this member has no synced copy of the range")
	}
	st, ok := kr.inf.GetIndexer().(interface{ Snapshot() ([]any, string) })
	if !ok {
		return fail("the range's cache cannot be copied")
	}
	objs, rv := st.Snapshot()
	if rv == "" {
		return fail("the range's cache has no resourceVersion")
	}
	if len(objs) <= snapshotChunk {
		return &snapshot{objs: objs, rv: rv, at: now}, nil
	}
	// Kept for the next chunks; a copy served in one chunk is not.
	if old := io.snapshots[k]; old != nil {
		old.drop() // the asker started over
	}
	sn := newSnapshot(objs, rv, now)
	io.snapshots[k] = sn
	return sn, nil
}

// copied is a range's cache as another member copied it: its objects,
// the resourceVersion they were taken at, and that member's filter mode
// ("server", "client", or "" when it did not know).
type copied struct {
	objs []runtime.Object
	rv   string
	mode string
}

// fetchSnapshot asks member from for a copy of range r's cache of kind s,
// chunk by chunk, and decodes it into new objects of the kind's example's
// type. It gives up once the member it asks loses its lease
// (copyWaits.leases).
func (inc *incarnation) fetchSnapshot(ctx context.Context, s *Informer, from handover.MemberID, addr string, r int, epoch uint64) (copied, error) {
	if addr == "" {
		return copied{}, errors.New("the member's address is unknown")
	}
	pid := actor.NewPID(addr, actorName(s.group))
	// The copy ends once the member it comes from loses its lease.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	remove := inc.copies.add(from, cancel)
	defer func() { remove() }()
	var cp copied
	redirects := 0
	for chunk := int32(0); ; chunk++ {
		if ctx.Err() != nil {
			return copied{}, context.Cause(ctx)
		}
		c, err := inc.requestChunk(ctx, pid, &shardpb.SnapshotRequest{Group: s.group, From: string(inc.id), To: string(from),
			Range: int32(r), Epoch: epoch, Chunk: chunk, Kind: s.kindKey})
		if err != nil {
			return copied{}, err
		}
		if c.Error != "" && c.MovedTo != "" && c.MovedToAddress != "" && chunk == 0 && redirects < 3 {
			// The member released the range after this one named it: ask
			// the member it went to, whose informer has synced it.
			redirects++
			from = handover.MemberID(c.MovedTo)
			pid = actor.NewPID(c.MovedToAddress, actorName(s.group))
			remove()
			remove = inc.copies.add(from, cancel)
			chunk--
			continue
		}
		if c.Error != "" {
			return copied{}, errors.New(c.Error)
		}
		if chunk == 0 {
			cp.rv, cp.mode = c.ResourceVersion, c.FilterMode
			cp.objs = make([]runtime.Object, 0, c.Total)
		} else if c.ResourceVersion != cp.rv {
			return copied{}, errors.New("the copy changed between chunks")
		}
		for _, b := range c.Objects {
			obj, err := s.decode(b)
			if err != nil {
				return copied{}, err
			}
			cp.objs = append(cp.objs, obj)
		}
		if c.Last {
			return cp, nil
		}
	}
}

// requestChunk asks pid for a chunk of a range's copy, for at most 10 s;
// a cancelled ctx stops the wait (stopping the future ends its Result at
// once) with ctx's cause.
func (inc *incarnation) requestChunk(ctx context.Context, pid *actor.PID, req *shardpb.SnapshotRequest) (*shardpb.SnapshotChunk, error) {
	f := inc.c.ActorSystem.Root.RequestFuture(pid, req, 10*time.Second)
	stop := context.AfterFunc(ctx, func() { inc.c.ActorSystem.Root.Stop(f.PID()) })
	res, err := f.Result()
	stop()
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("chunk %d: %w", req.Chunk, err)
	}
	c, ok := res.(*shardpb.SnapshotChunk)
	if !ok {
		return nil, fmt.Errorf("chunk %d: answered %T", req.Chunk, res)
	}
	return c, nil
}

// errSourceReleased ends a copy whose source's lease was released.
var errSourceReleased = errors.New("the member copied from has lost its lease (released or revoked): it may be frozen or gone")

// errSourceDeleted ends a copy whose source's lease was deleted.
var errSourceDeleted = errors.New("the lease of the member copied from was deleted: it may be frozen or gone")

// copyWaits are the copies under way, by the member they come from. A
// member whose lease is released (revoked by a peer once it stopped
// renewing it) or deleted answers no more: it is frozen, gone, or fenced
// (a fenced member has dropped its ranges). A copy from it would wait out
// its chunk's timeout before the range is listed. Ending a copy early
// costs at most a list: the range is claimed as before.
type copyWaits struct {
	mu sync.Mutex
	m  map[handover.MemberID]map[*context.CancelCauseFunc]struct{}
	// held: the lease holders of the last snapshot (nil before the first).
	held map[handover.MemberID]bool
}

// add records a copy from member from, cancelled by cancel; the returned
// func removes it.
func (w *copyWaits) add(from handover.MemberID, cancel context.CancelCauseFunc) (remove func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[handover.MemberID]map[*context.CancelCauseFunc]struct{}{}
	}
	if w.m[from] == nil {
		w.m[from] = map[*context.CancelCauseFunc]struct{}{}
	}
	k := &cancel
	w.m[from][k] = struct{}{}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.m[from], k)
		if len(w.m[from]) == 0 {
			delete(w.m, from)
		}
	}
}

// leases takes a snapshot of the group's leases: it cancels the copies
// from the members it shows released, and from those that held a lease in
// the last snapshot and hold none in this one (their lease was deleted, or
// replaced by a tombstone).
func (w *copyWaits) leases(snap *handover.Leases) {
	held := make(map[handover.MemberID]bool, len(snap.Leases))
	for _, l := range snap.Leases {
		held[l.Holder] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	released := make(map[handover.MemberID]bool, len(snap.Released))
	for _, id := range snap.Released {
		released[id] = true
		w.cancel(id, errSourceReleased)
	}
	for id := range w.held {
		if !held[id] && !released[id] {
			w.cancel(id, errSourceDeleted)
		}
	}
	w.held = held
}

// cancel ends the copies from id with why; w.mu is held.
func (w *copyWaits) cancel(id handover.MemberID, why error) {
	for k := range w.m[id] {
		(*k)(why)
	}
}

// decode makes a new object of the informer's type from JSON.
func (s *Informer) decode(b []byte) (runtime.Object, error) {
	if s.example == nil {
		return nil, errors.New("no example object to decode into")
	}
	obj, ok := reflect.New(reflect.TypeOf(s.example).Elem()).Interface().(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not a runtime.Object", s.example)
	}
	if err := json.Unmarshal(b, obj); err != nil {
		return nil, fmt.Errorf("cannot decode an object of the copy: %w", err)
	}
	return obj, nil
}

// fellBack counts a warm start that could not be, and logs its reason the
// first time.
func (inc *incarnation) fellBack(r Range, from handover.MemberID, why string) {
	inc.s.warm.fallbacks.Add(1)
	if _, seen := inc.s.warm.once.LoadOrStore(why, true); !seen {
		inc.log.Info("a range's informer lists instead of starting from the previous deliverer's copy (logged once per reason)",
			"range", r.String(), "from", string(from), "reason", why)
	}
}
