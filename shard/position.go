package shard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// Positions (docs/sharding.md, "Positions"): a range's delivered position
// is the resourceVersion up to which every handler of the range was given
// every event of it; each lease renewal carries it with the range's token.
// It is a lower bound: a delete given after a lost member's last renewal
// is given again by the next owner, at the same resourceVersion.

// AnnotationPositions, on a member's lease, are its ranges' positions:
// "index=token:version", comma-separated, by index; a group of several
// kinds adds those of the kinds after New's, "kind/index=token:version"
// (the kind's key, AddKind).
const AnnotationPositions = "actorinformer.io/shard-positions"

// position is a range's delivered position under a token.
type position struct {
	token   uint64
	version int64
}

// newer reports whether p is a later delivery's, or a later position of
// the same delivery, than q.
func (p position) newer(q position) bool {
	return p.token > q.token || p.token == q.token && p.version > q.version
}

// kindPositions are positions per kind (by its key; "" for New's) and
// range.
type kindPositions map[string]map[int]position

// merge keeps, per kind and range, the newer of its and p.
func (kp kindPositions) merge(kind string, r int, p position) {
	if !p.newer(kp[kind][r]) {
		return
	}
	if kp[kind] == nil {
		kp[kind] = map[int]position{}
	}
	kp[kind][r] = p
}

// encode is kp as an AnnotationPositions.
func (kp kindPositions) encode() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(kp)) {
		for _, i := range slices.Sorted(maps.Keys(kp[k])) {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			if k != "" {
				b.WriteString(k)
				b.WriteByte('/')
			}
			fmt.Fprintf(&b, "%d=%d:%d", i, kp[k][i].token, kp[k][i].version)
		}
	}
	return b.String()
}

// decodeKindPositions decodes an AnnotationPositions.
func decodeKindPositions(s string) (kindPositions, error) {
	out := kindPositions{}
	if s == "" {
		return out, nil
	}
	for _, f := range strings.Split(s, ",") {
		key, idx, ok0 := strings.Cut(f, "/")
		if !ok0 {
			key, idx = "", f
		}
		idx, rest, ok1 := strings.Cut(idx, "=")
		tok, ver, ok2 := strings.Cut(rest, ":")
		i, err1 := strconv.Atoi(idx)
		t, err2 := strconv.ParseUint(tok, 10, 64)
		v, err3 := strconv.ParseInt(ver, 10, 64)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil || i < 0 || v <= 0 || ok0 && key == "" {
			return nil, fmt.Errorf("shard: malformed position %q in %s", f, AnnotationPositions)
		}
		if out[key] == nil {
			out[key] = map[int]position{}
		}
		out[key][i] = position{token: t, version: v}
	}
	return out, nil
}

// positionsAnnotation is the AnnotationPositions of this member's next
// lease write: every kind's positions.
func (sh *shared) positionsAnnotation() string {
	kp := kindPositions{}
	for _, k := range sh.kinds {
		if ps := k.positions(); len(ps) > 0 {
			kp[k.kindKey] = ps
		}
	}
	return kp.encode()
}

// positions are this member's delivered ranges' positions, for its next
// lease write. A range counts once its activation has ended (its
// handlers were given the activation's tombstones). Its position is what its
// informer had been handed when its handlers were last known to have been
// given all of it: now, or else at the previous write, if they have been
// given that since. A range whose handlers are always a few events behind
// (a steady stream) so still advances its position at every write.
func (s *Informer) positions() map[int]position {
	ps := map[int]position{}
	s.finalMu.Lock()
	defer s.finalMu.Unlock()
	maps.Copy(ps, s.finals)
	for _, ri := range *s.delivered.Load() {
		if !ri.activated.Load() || !ri.delivering.Load() {
			continue
		}
		kr := ri.of(s)
		fwd, obj := kr.lw.versions()
		switch {
		case s.given(kr, obj):
			kr.position.Store(max(kr.position.Load(), fwd))
		case kr.sampled.forwarded > 0 && s.given(kr, kr.sampled.object):
			kr.position.Store(max(kr.position.Load(), kr.sampled.forwarded))
		}
		kr.sampled.forwarded, kr.sampled.object = fwd, obj
		if v := kr.position.Load(); v > 0 {
			ps[ri.r.Index] = position{token: ri.token, version: v}
		}
	}
	return ps
}

// releasedAt records a released range's final position: the
// resourceVersion up to which its handlers were given every event.
func (s *Informer) releasedAt(r int, p position) {
	if p.version <= 0 {
		return
	}
	s.finalMu.Lock()
	defer s.finalMu.Unlock()
	if s.finals == nil {
		s.finals = map[int]position{}
	}
	if p.newer(s.finals[r]) {
		s.finals[r] = p
	}
}

// mergePositions is the newest position of each kind's range of two
// annotations (a malformed one counts as none).
func mergePositions(a, b string) string {
	kp, err := decodeKindPositions(a)
	if err != nil {
		kp = kindPositions{}
	}
	if more, err := decodeKindPositions(b); err == nil {
		for k, ps := range more {
			for i, p := range ps {
				kp.merge(k, i, p)
			}
		}
	}
	return kp.encode()
}

// learnPositions merges the positions the group's leases carry into
// known: per kind and range, the newest delivery's. A lease that is
// deleted later leaves its positions known.
func learnPositions(known kindPositions, objs []any, ranges int) (malformed []string) {
	for _, obj := range objs {
		l, ok := obj.(interface{ GetAnnotations() map[string]string })
		if !ok {
			continue
		}
		a := l.GetAnnotations()[AnnotationPositions]
		if a == "" {
			continue
		}
		kp, err := decodeKindPositions(a)
		if err != nil {
			malformed = append(malformed, err.Error())
			continue
		}
		for k, ps := range kp {
			for i, p := range ps {
				if i < ranges {
					known.merge(k, i, p)
				}
			}
		}
	}
	return malformed
}

// replayTimeout bounds each watch of a replay: the API server ends it
// after that many seconds, having sent every change of the range after
// the version it started from that it had. A watch that the server ended
// so with no change at all ends the replay: the range had none since. A
// watch that ends sooner with nothing (a broken stream) is opened again,
// up to replayTries times; one that sends nothing for replayWatch (the
// server's deadline did not come) ends the replay short. Vars for tests.
var (
	replayTimeout int64 = 1
	replayWatch         = 5 * time.Second
	replayTries         = 3
)

// replay watches range lw's objects from version from until it has seen a
// version at or past to, or a whole watch with no change, and returns the
// objects whose last event then was a delete, by key, in their last
// state. complete is false when the watches ended without either (an
// error: 410 Gone once the version left the API server's window).
func replay(ctx context.Context, lw *rangeLW, from, to int64) (deleted map[string]runtime.Object, complete bool, err error) {
	deleted = map[string]runtime.Object{}
	at := from
	for tries := 0; at < to; {
		progressed, ended, err := replayOnce(ctx, lw, &at, to, deleted)
		switch {
		case err != nil:
			return stillGone(deleted), false, err
		case progressed:
			tries = 0
		case ended:
			return stillGone(deleted), true, nil
		default:
			if tries++; tries >= replayTries {
				return stillGone(deleted), false, nil
			}
		}
	}
	return stillGone(deleted), true, nil
}

// noteDelete records an object event in deleted: a delete's object by
// key, nil once the key is added or changed again. held, when not nil,
// keeps the objects handed on: an object event's object by key, none once
// deleted.
func noteDelete(deleted, held map[string]runtime.Object, e watch.Event) {
	k, err := cache.MetaNamespaceKeyFunc(e.Object)
	if err != nil {
		return
	}
	if e.Type == watch.Deleted {
		deleted[k] = e.Object
		delete(held, k)
		return
	}
	deleted[k] = nil
	if held != nil {
		held[k] = e.Object
	}
}

// stillGone drops from deleted the keys added again since their delete.
func stillGone(deleted map[string]runtime.Object) map[string]runtime.Object {
	for k, o := range deleted {
		if o == nil {
			delete(deleted, k)
		}
	}
	return deleted
}

// replayOnce runs one watch of a replay. ended: the server ended it at its
// deadline, after every change up to then.
func replayOnce(ctx context.Context, lw *rangeLW, at *int64, to int64, deleted map[string]runtime.Object) (progressed, ended bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, replayWatch)
	defer cancel()
	timeout := replayTimeout
	begun := time.Now()
	w, err := cache.ToWatcherWithContext(lw.inner).WatchWithContext(ctx, lw.options(metav1.ListOptions{
		ResourceVersion: strconv.FormatInt(*at, 10), AllowWatchBookmarks: true, TimeoutSeconds: &timeout}))
	if err != nil {
		return false, false, err
	}
	defer w.Stop()
	for {
		var e watch.Event
		var ok bool
		select {
		case e, ok = <-w.ResultChan():
		case <-ctx.Done():
			return progressed, false, nil
		}
		if !ok {
			// Closed by the server at its deadline (a little early on our
			// clock is still its deadline), or sooner (a broken stream).
			return progressed, time.Since(begun) >= time.Duration(timeout)*time.Second-100*time.Millisecond, nil
		}
		switch e.Type {
		case watch.Error:
			return progressed, false, fmt.Errorf("the watch from %d: %w", *at, apierrors.FromObject(e.Object))
		case watch.Added, watch.Modified, watch.Deleted:
			if !lw.in(e.Object) {
				continue
			}
			noteDelete(deleted, nil, e)
		}
		if n, perr := strconv.ParseInt(versionOf(e.Object), 10, 64); perr == nil && n > *at {
			*at, progressed = n, true
		}
		if *at >= to {
			return true, false, nil
		}
	}
}

// resumed is what a range resumed from a position needs for its
// activation: the objects deleted since the position it resumed from.
type resumed struct {
	deleted map[string]runtime.Object
}

// missingSince returns the objects of rs deleted since its position, and
// of those the range's intake took before its activation (lw.deleted),
// that the range's cache no longer has, as handover refs, with their last
// states in finals. A delete at or before position after (the previous
// deliverer's handlers were given it) is left out; a relist's implied
// delete, of unknown version, is not.
func missingSince(rs *resumed, pre map[string]runtime.Object, after int64, ix cache.Indexer, finals map[string]any) []handover.ObjectRef {
	all := make(map[string]runtime.Object, len(rs.deleted)+len(pre))
	maps.Copy(all, rs.deleted)
	maps.Copy(all, pre)
	var out []handover.ObjectRef
	for _, k := range slices.Sorted(maps.Keys(all)) {
		if _, ok, _ := ix.GetByKey(k); ok {
			continue
		}
		o := all[k]
		implied, isImplied := o.(impliedDelete)
		if isImplied {
			o = implied.Object
		}
		ref := handover.ObjectRef{Key: k}
		if m, err := meta.Accessor(o); err == nil {
			ref.UID, ref.Version = string(m.GetUID()), m.GetResourceVersion()
			if v, err := strconv.ParseInt(ref.Version, 10, 64); err == nil && v <= after && !isImplied {
				continue
			}
		}
		finals[k] = o
		out = append(out, ref)
	}
	return out
}
