package fifo

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/tools/cache"
)

// obj is a minimal test object: a key and a version.
type obj struct {
	K string
	V int
}

func o(k string, v int) obj { return obj{k, v} }

func added(k string, v int) Delta    { return Delta{Type: Added, Key: k, Object: o(k, v)} }
func updated(k string, v int) Delta  { return Delta{Type: Updated, Key: k, Object: o(k, v)} }
func deleted(k string, v int) Delta  { return Delta{Type: Deleted, Key: k, Object: o(k, v)} }
func replaced(k string, v int) Delta { return Delta{Type: Replaced, Key: k, Object: o(k, v)} }
func synced(k string, v int) Delta   { return Delta{Type: Sync, Key: k, Object: o(k, v)} }

// tomb is a Deleted delta carrying a tombstone of inner (nil allowed).
func tomb(k string, inner any) Delta {
	return Delta{Type: Deleted, Key: k, Object: cache.DeletedFinalStateUnknown{Key: k, Obj: inner}}
}

func initial(d Delta) Delta { d.InitialList = true; return d }

// bm is the Bookmark delta of resource version rv.
func bm(rv string) Delta { return NewBookmark(rv) }

// known is an ordered fake of the cache's read handle.
type known struct {
	keys []string
	objs map[string]any
	err  map[string]error
}

func newKnown(objs ...obj) *known {
	k := &known{objs: map[string]any{}, err: map[string]error{}}
	for _, ob := range objs {
		k.set(ob.K, ob)
	}
	return k
}

func (k *known) set(key string, v any) {
	if _, ok := k.objs[key]; !ok {
		k.keys = append(k.keys, key)
	}
	k.objs[key] = v
}

func (k *known) del(key string) {
	delete(k.objs, key)
	for i, kk := range k.keys {
		if kk == key {
			k.keys = append(k.keys[:i:i], k.keys[i+1:]...)
			break
		}
	}
}

func (k *known) ListKeys() []string { return append([]string(nil), k.keys...) }

func (k *known) GetByKey(key string) (any, bool, error) {
	if err := k.err[key]; err != nil {
		return nil, false, err
	}
	v, ok := k.objs[key]
	return v, ok, nil
}

var errLookup = errors.New("lookup failed")

// popAll pops and acknowledges batches until the queue is empty, returning
// copies of every delta in order.
func popAll(t *testing.T, q *Queue) []Delta {
	t.Helper()
	var out []Delta
	for {
		b := q.pop()
		if b == nil {
			if q.Len() != 0 {
				t.Fatalf("Pop returned nil with Len %d", q.Len())
			}
			return out
		}
		out = append(out, b.Deltas...)
		q.done(len(b.Deltas))
	}
}

// popOne pops a batch and returns a copy of its deltas, leaving it in
// flight.
func popOne(t *testing.T, q *Queue) []Delta {
	t.Helper()
	b := q.pop()
	if b == nil {
		t.Fatalf("Pop returned nil")
	}
	return append([]Delta(nil), b.Deltas...)
}

func describe(ds []Delta) string {
	var sb strings.Builder
	for i, d := range ds {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%s %s %v", d.Type, d.Key, d.Object)
		if d.InitialList {
			sb.WriteString(" (initial)")
		}
	}
	return "[" + sb.String() + "]"
}

func wantDeltas(t *testing.T, got, want []Delta) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("deltas:\n got  %s\n want %s", describe(got), describe(want))
	}
}

// pendingKeys counts the keys with something queued or in flight.
func (q *Queue) pendingKeys() int {
	q.indexKeys()
	n := 0
	lo := q.seq(q.lo)
	for _, s := range q.last {
		if s >= lo {
			n++
		}
	}
	return n
}
