package fifo

import (
	"strconv"
	"testing"
)

func benchKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "ns/obj-" + strconv.Itoa(i)
	}
	return ks
}

// BenchmarkQueueAddPop: one delta in, one batch out and acknowledged, per op.
func BenchmarkQueueAddPop(b *testing.B) {
	ks := benchKeys(1024)
	q := New(Config{})
	items := make([]Delta, 1)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		items[0] = Delta{Type: Updated, Key: ks[i&1023], Object: benchObj}
		q.add(items)
		bt := q.pop()
		q.done(len(bt.Deltas))
	}
}

// BenchmarkQueueAddPop100: 100 deltas in, one batch out, per op; ns/op is
// per 100 deltas.
func BenchmarkQueueAddPop100(b *testing.B) {
	ks := benchKeys(1024)
	q := New(Config{})
	items := make([]Delta, 100)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range items {
			items[j] = Delta{Type: Updated, Key: ks[(i*100+j)&1023], Object: benchObj}
		}
		q.add(items)
		bt := q.pop()
		q.done(len(bt.Deltas))
	}
}

// BenchmarkQueueBacklog: one delta in per op while a batch is always in
// flight and ~1000 deltas are queued; a batch of 64 is acknowledged and the
// next popped every 64 ops.
func BenchmarkQueueBacklog(b *testing.B) {
	ks := benchKeys(4096)
	q := New(Config{MaxBatch: 64})
	items := make([]Delta, 1)
	for i := range 1000 {
		items[0] = Delta{Type: Updated, Key: ks[i&4095], Object: benchObj}
		q.add(items)
	}
	q.pop()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		items[0] = Delta{Type: Updated, Key: ks[i&4095], Object: benchObj}
		q.add(items)
		if i&63 == 63 {
			q.done(64)
			q.pop()
		}
	}
}

// BenchmarkQueueDeleteCollapse: a delete merged into a queued delete, per op.
func BenchmarkQueueDeleteCollapse(b *testing.B) {
	q := New(Config{})
	q.add([]Delta{{Type: Added, Key: "ns/a"}, {Type: Deleted, Key: "ns/a"}})
	items := []Delta{{Type: Deleted, Key: "ns/a"}}
	b.ReportAllocs()
	for b.Loop() {
		q.add(items)
	}
}

// BenchmarkQueueReplace10k: a relist of 10,000 objects (half of the 10,000
// cached ones missing, so 5,000 tombstones), queued and drained, per op.
func BenchmarkQueueReplace10k(b *testing.B) {
	ks := benchKeys(15000)
	k := newKnown()
	for _, key := range ks[:10000] {
		k.set(key, key)
	}
	items := make([]Delta, 10000)
	for i := range items {
		items[i] = Delta{Type: Replaced, Key: ks[5000+i], Object: i}
	}
	q := New(Config{Known: k})
	b.ReportAllocs()
	for b.Loop() {
		q.replace(items, "1", nil)
		for bt := q.pop(); bt != nil; bt = q.pop() {
			q.done(len(bt.Deltas))
		}
	}
}

// BenchmarkQueueResync10k: a resync of 10,000 cached objects, queued and
// drained, per op.
func BenchmarkQueueResync10k(b *testing.B) {
	k := newKnown()
	for _, key := range benchKeys(10000) {
		k.set(key, key)
	}
	q := New(Config{Known: k})
	b.ReportAllocs()
	for b.Loop() {
		q.resync()
		for bt := q.pop(); bt != nil; bt = q.pop() {
			q.done(len(bt.Deltas))
		}
	}
}

var benchObj any = &struct{ Name string }{"obj"}

// BenchmarkQueueInputs: one *Deltas message of one delta in, its batch out
// and acknowledged, through Step, as a shell calls it, per op (on a queue
// that has synced).
func BenchmarkQueueInputs(b *testing.B) {
	q := New(Config{})
	ack := &Processed{Count: 1}
	q.add([]Delta{{Type: Added, Key: "ns/a"}}) // syncs
	q.done(len(q.pop().Deltas))
	b.ReportAllocs()
	for b.Loop() {
		m := NewDeltas(1)
		m.Items = append(m.Items, Delta{Type: Added, Key: "ns/a"})
		if out := q.Step(m); len(out) != 1 {
			b.Fatalf("%d messages", len(out))
		}
		if out := q.Step(ack); len(out) != 0 {
			b.Fatalf("%d messages", len(out))
		}
	}
}

// BenchmarkQueueWatch: a watch stream's pattern, one message of 2 updates
// in per op (keys round-robin over 10,000), with a batch popped and
// acknowledged every 16 deltas, so that the queue drains as it does behind
// an indexer that keeps up.
func BenchmarkQueueWatch(b *testing.B) {
	ks := benchKeys(10000)
	q := New(Config{})
	items := make([]Delta, 2)
	b.ReportAllocs()
	for i := 0; b.Loop(); i += 2 {
		for j := range items {
			items[j] = Delta{Type: Updated, Key: ks[(i+j)%len(ks)], Object: benchObj}
		}
		q.add(items)
		if i%16 == 14 {
			bt := q.pop()
			q.done(len(bt.Deltas))
		}
	}
}
