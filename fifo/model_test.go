package fifo

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"k8s.io/client-go/tools/cache"
)

// model is a deliberately naive implementation of the queue's rules
// (linear scans, plain slices) that the real Queue is checked against.
type model struct {
	max       int
	known     *known
	queued    []Delta
	run       []int // per queued delta: the relist it belongs to, 0 for none
	runs      int   // relists so far
	inflight  []Delta
	atomic    bool // the in-flight batch holds a relist
	populated bool
	synced    bool
	initLeft  int // first-Replace deltas not yet acknowledged
}

// last returns the key's last pending delta, queued first, then in flight.
func (m *model) last(key string) (Delta, bool) {
	for i := len(m.queued) - 1; i >= 0; i-- {
		if m.queued[i].Key == key {
			return m.queued[i], true
		}
	}
	for i := len(m.inflight) - 1; i >= 0; i-- {
		if m.inflight[i].Key == key {
			return m.inflight[i], true
		}
	}
	return Delta{}, false
}

func (m *model) present(key string) (any, bool) {
	if d, ok := m.last(key); ok {
		return d.Object, d.Type != Deleted
	}
	v, ok := m.known.objs[key]
	return v, ok
}

func (m *model) add(items []Delta) {
	if len(items) == 0 {
		return
	}
	for _, d := range items {
		if d.Type != Bookmark && !m.populated {
			m.populated, m.synced = true, true
		}
	}
	for _, d := range items {
		d.InitialList = false
		if d.Type == Deleted {
			lq := -1
			for i := len(m.queued) - 1; i >= 0; i-- {
				if m.queued[i].Key == d.Key {
					lq = i
					break
				}
			}
			if lq >= 0 && m.queued[lq].Type == Deleted {
				if isTombstone(m.queued[lq].Object) && !isTombstone(d.Object) {
					m.queued[lq].Object = d.Object
				}
				continue
			}
			if _, ok := m.present(d.Key); !ok {
				continue
			}
		}
		m.queued = append(m.queued, d)
		m.run = append(m.run, 0)
	}
}

func (m *model) replace(items []Delta, rv string) {
	first := !m.populated
	m.populated = true
	relist := len(m.known.keys) > 0 || len(m.inflight) > 0 || len(m.queued) > 0
	listed := map[string]bool{}
	for _, d := range items {
		listed[d.Key] = true
	}
	// Pending keys in order of their last delta.
	all := append(append([]Delta(nil), m.inflight...), m.queued...)
	var tombs []Delta
	for i, d := range all {
		if d.Type == Bookmark {
			continue
		}
		isLast := true
		for _, e := range all[i+1:] {
			if e.Key == d.Key {
				isLast = false
			}
		}
		if !isLast || listed[d.Key] || d.Type == Deleted {
			continue
		}
		tombs = append(tombs, tomb(d.Key, unwrap(d.Object)))
	}
	for _, k := range m.known.keys {
		if listed[k] {
			continue
		}
		if _, pending := m.last(k); pending {
			continue
		}
		tombs = append(tombs, tomb(k, unwrap(m.known.objs[k])))
	}
	run := 0
	if relist {
		m.runs++
		run = m.runs
	}
	for _, d := range append(append(tombs, items...), bm(rv)) {
		d.InitialList = first
		m.queued = append(m.queued, d)
		m.run = append(m.run, run)
	}
	if first {
		m.initLeft = len(items) + len(tombs) + 1
		m.synced = false
	}
}

func unwrap(o any) any {
	if ts, ok := o.(cache.DeletedFinalStateUnknown); ok {
		return ts.Obj
	}
	return o
}

func (m *model) resync() {
	for _, k := range m.known.keys {
		if _, pending := m.last(k); pending {
			continue
		}
		m.queued = append(m.queued, Delta{Type: Sync, Key: k, Object: m.known.objs[k]})
		m.run = append(m.run, 0)
	}
}

func (m *model) pop() []Delta {
	if len(m.inflight) > 0 || len(m.queued) == 0 {
		return nil
	}
	k := min(len(m.queued), m.max)
	if !m.synced {
		for i := len(m.queued) - 1; i >= 0; i-- {
			if m.queued[i].InitialList {
				k = min(k, i+1)
				break
			}
		}
	}
	// A relist is never split.
	for k < len(m.queued) && m.run[k] != 0 && m.run[k] == m.run[k-1] {
		k++
	}
	m.atomic = slices.ContainsFunc(m.run[:k], func(r int) bool { return r != 0 })
	m.inflight = append([]Delta(nil), m.queued[:k]...)
	m.queued = append([]Delta(nil), m.queued[k:]...)
	m.run = append([]int(nil), m.run[k:]...)
	return m.inflight
}

func (m *model) done() {
	for _, d := range m.inflight {
		if d.InitialList {
			m.initLeft--
		}
	}
	if m.populated && !m.synced && m.initLeft == 0 {
		m.synced = true
	}
	m.inflight = nil
}

// apply is what the consumer does with a batch.
func apply(k *known, ds []Delta) {
	for _, d := range ds {
		switch d.Type {
		case Bookmark:
		case Deleted:
			k.del(d.Key)
		default:
			k.set(d.Key, d.Object)
		}
	}
}

func TestQueue_model(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 7))
		maxBatch := 1 + rng.IntN(8)
		qk, mk := newKnown(), newKnown()
		// Some runs start with a populated cache.
		if seed%3 == 0 {
			for _, k := range keys[:3] {
				qk.set(k, o(k, 0))
				mk.set(k, o(k, 0))
			}
		}
		q := New(Config{Known: qk, MaxBatch: maxBatch})
		if seed%2 == 1 {
			// Drop the per-key map at every drain, which these short
			// scripts would otherwise never reach.
			q.clearMapLen = 1
		}
		m := &model{max: maxBatch, known: mk}
		v := 0
		randDelta := func() Delta {
			v++
			k := keys[rng.IntN(len(keys))]
			switch rng.IntN(7) {
			case 6:
				return bm(strconv.Itoa(v))
			case 0:
				return added(k, v)
			case 1, 2:
				return updated(k, v)
			case 3:
				return tomb(k, o(k, v))
			default:
				return deleted(k, v)
			}
		}
		var inflight []Delta
		var trail []string
		for step := range 400 {
			switch r := rng.IntN(20); {
			case r < 8:
				n := 1 + rng.IntN(4)
				ds := make([]Delta, n)
				for i := range ds {
					ds[i] = randDelta()
				}
				trail = append(trail, "add "+describe(ds))
				q.add(ds)
				m.add(ds)
			case r < 10:
				var ds []Delta
				for _, k := range keys {
					if rng.IntN(2) == 0 {
						v++
						ds = append(ds, replaced(k, v))
					}
				}
				trail = append(trail, "replace "+describe(ds))
				rv := strconv.Itoa(v)
				q.replace(ds, rv, nil)
				m.replace(ds, rv)
			case r < 11:
				trail = append(trail, "resync")
				q.resync()
				m.resync()
			case r < 16:
				b := q.pop()
				want := m.pop()
				var got []Delta
				if b != nil {
					got = b.Deltas
				}
				trail = append(trail, "pop "+describe(got))
				if (b == nil) != (want == nil) || (b != nil && (!reflect.DeepEqual(got, want) || b.Atomic != m.atomic)) {
					t.Fatalf("seed %d step %d: pop\n got  %s\n want %s\ntrail:\n%v", seed, step, describe(got), describe(want), trail)
				}
				if b != nil {
					inflight = b.Deltas
				}
			default:
				if inflight == nil {
					continue
				}
				trail = append(trail, "done")
				apply(qk, inflight)
				apply(mk, inflight)
				q.done(len(inflight))
				m.done()
				inflight = nil
			}
			if q.HasSynced() != m.synced || q.Len() != len(m.queued) {
				t.Fatalf("seed %d step %d: synced %v/%v len %d/%d\ntrail:\n%v", seed, step,
					q.HasSynced(), m.synced, q.Len(), len(m.queued), trail)
			}
		}
	}
}
