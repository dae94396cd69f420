package indexer

import (
	"strconv"
	"testing"

	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/stage"
)

// BenchmarkRelist measures a relist of 100,000 pods through the queue and
// the core, as the bench's relist scenario does without the actors: the
// queue builds the relist (fifo.Queue.Replace: tombstones first), hands it
// as one Atomic batch, and the core applies it for 4 subscribers. The
// lists alternate between all the pods and a list with 10 % of them gone
// and 10 % changed, so that one op is one relist either way (10,000
// tombstones or adds, 90,000 updates).
func BenchmarkRelist(b *testing.B) {
	const n = 100_000
	full := make([]fifo.Delta, n)
	var part []fifo.Delta
	for i := range n {
		ns := "ns" + strconv.Itoa(i%50)
		name := "pod-" + strconv.Itoa(i)
		full[i] = fifo.Delta{Type: fifo.Replaced, Key: ns + "/" + name, Object: pod(ns, name, "1")}
		switch i % 10 {
		case 0:
		case 5:
			part = append(part, fifo.Delta{Type: fifo.Replaced, Key: ns + "/" + name, Object: pod(ns, name, "2")})
		default:
			part = append(part, full[i])
		}
	}
	s := NewStore(nil, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	q := fifo.New(fifo.Config{Known: s})
	c := NewCore(s.Writer(), Config{})
	for id := range ListenerID(4) {
		c.Step(new(counts).subscribe(id + 1))
	}
	ack := &fifo.Processed{}
	relist := func(items []fifo.Delta) {
		out := q.Step(&fifo.Replace{Items: ownedCopy(items), ResourceVersion: "1"})
		for bt := batchIn(out); bt != nil; bt = batchIn(out) {
			c.Step(bt)
			ack.Count = len(bt.Deltas)
			out = q.Step(ack)
		}
	}
	relist(full)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			relist(part)
		} else {
			relist(full)
		}
	}
}

// ownedCopy copies items: the queue takes ownership of what Replace is given.
func ownedCopy(items []fifo.Delta) []fifo.Delta {
	return append(make([]fifo.Delta, 0, len(items)+1), items...)
}

// batchIn returns the batch among a queue input's messages, if any.
func batchIn(msgs []stage.Msg) *fifo.Batch {
	for _, m := range msgs {
		if b, ok := m.Body.(*fifo.Batch); ok {
			return b
		}
	}
	return nil
}
