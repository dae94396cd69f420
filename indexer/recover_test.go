package indexer

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/internal/telemetry"
	"github.com/actorinformer/actorinformer/stage"
)

// panicAt is a mutation detector whose at-th AddObject (from 1) panics.
type panicAt struct{ at, calls int }

func (d *panicAt) AddObject(any) {
	d.calls++
	if d.calls == d.at {
		panic("detector bug")
	}
}
func (d *panicAt) Run(<-chan struct{}) {}

// applyPanics calls ApplyBatch and reports whether it panicked.
func applyPanics(c *Core, b *fifo.Batch) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	c.ApplyBatch(b)
	return false
}

// TestCoreRecoverSendsAppliedPart: when ApplyBatch panics (here in the
// mutation detector, after the write of the delta it was fed), Recover
// sends the notifications of every delta written to the cache before the
// panic, the delta that panicked included, as one batch to every
// subscriber with their counters raised, then acknowledges the whole
// batch; it logs an error saying so. The cache's version is that of the
// last delta written. Tested across a chunk boundary, so that progress
// made in an earlier chunk and in the chunk that panicked both count.
func TestCoreRecoverSendsAppliedPart(t *testing.T) {
	var logs bytes.Buffer
	tel := telemetry.New(telemetry.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s := NewStore(nil, nil)
	det := &panicAt{}
	c := NewCore(s.Writer(), Config{Clock: newFakeClock(), Telemetry: tel, MutationDetector: det})
	if msgs := c.Recover(); len(msgs) != 0 {
		t.Fatalf("Recover with no batch in progress sent %v", msgs)
	}
	p1, b1 := counters()
	c.subscribe(&Subscribe{ID: 1, Pending: p1, Backlog: b1})
	c.subscribe(&Subscribe{ID: 2})

	const total, panicOn = applyChunk + 50, applyChunk + 20 // in the second chunk
	deltas := make([]fifo.Delta, 0, total+1)
	for i := range total {
		d := delta(fifo.Added, pod("ns", "p"+strconv.Itoa(i), strconv.Itoa(100+i)))
		d.InitialList = true
		deltas = append(deltas, d)
	}
	deltas = append(deltas, fifo.Delta{Type: fifo.Deleted, Key: "ns/p0", Object: pod("ns", "p0", "999")})
	det.at = panicOn
	if !applyPanics(c, &fifo.Batch{Deltas: deltas}) {
		t.Fatal("ApplyBatch did not panic")
	}

	msgs := c.Recover()
	var got []*Notifications
	var processed *fifo.Processed
	for i, m := range msgs {
		switch b := m.Body.(type) {
		case *Notifications:
			if m.To.Kind != stage.Listener || processed != nil {
				t.Errorf("message %d: notifications to %v after the acknowledgement %v", i, m.To, processed)
			}
			got = append(got, b)
		case *fifo.Processed:
			if m.To != stage.ToQueue {
				t.Errorf("Processed sent to %v", m.To)
			}
			processed = b
		default:
			t.Errorf("message %d: unexpected %T", i, m.Body)
		}
	}
	if processed == nil || processed.Count != len(deltas) {
		t.Fatalf("acknowledgement %v, want Processed{Count: %d}", processed, len(deltas))
	}
	if len(got) != 2 || got[0] != got[1] {
		t.Fatalf("got %d batches, want the same one to each of the 2 subscribers", len(got))
	}
	items := got[0].Items
	if len(items) != panicOn {
		t.Fatalf("%d notifications, want the %d deltas written before the panic (the one that panicked included)", len(items), panicOn)
	}
	for i, it := range items {
		if it.Type != NotifyAdd || !it.InitialList || key(it.New) != "ns/p"+strconv.Itoa(i) {
			t.Fatalf("notification %d: %v %v initial=%v", i, it.Type, key(it.New), it.InitialList)
		}
	}
	if p1.Load() != panicOn || b1.Load() != panicOn {
		t.Errorf("Pending = %d, Backlog = %d; want %d each", p1.Load(), b1.Load(), panicOn)
	}
	if s.Len() != panicOn {
		t.Errorf("cache holds %d objects, want %d", s.Len(), panicOn)
	}
	if rv, want := s.LastStoreSyncResourceVersion(), strconv.Itoa(100+panicOn-1); rv != want {
		t.Errorf("cache version %q, want %q (the last delta written)", rv, want)
	}
	if l := logs.String(); strings.Count(l, "level=ERROR") != 1 || !strings.Contains(l, "panicked") || !strings.Contains(l, "partly applied") {
		t.Errorf("logged %q, want one error saying the batch panicked and was partly applied", l)
	}

	// The batch is done: a second Recover does nothing, and the next batch
	// is applied as usual.
	if msgs := c.Recover(); len(msgs) != 0 {
		t.Fatalf("second Recover sent %v", msgs)
	}
	msgs = c.ApplyBatch(&fifo.Batch{Deltas: []fifo.Delta{delta(fifo.Updated, pod("ns", "p0", "2000"))}})
	if len(msgs) != 3 {
		t.Fatalf("next batch: %d messages, want 2 notifications and Processed", len(msgs))
	}
	if n := msgs[0].Body.(*Notifications); len(n.Items) != 1 || n.Items[0].Type != NotifyUpdate {
		t.Errorf("next batch: %+v", n.Items)
	}
	if b1.Load() != panicOn+1 {
		t.Errorf("Backlog = %d, want %d", b1.Load(), panicOn+1)
	}
}

// TestCoreRecoverNoSubscriber: with no subscriber, Recover only
// acknowledges the batch.
func TestCoreRecoverNoSubscriber(t *testing.T) {
	s := NewStore(nil, nil)
	c := NewCore(s.Writer(), Config{Clock: newFakeClock(), MutationDetector: &panicAt{at: 2}})
	deltas := []fifo.Delta{delta(fifo.Added, pod("ns", "a", "1")), delta(fifo.Added, pod("ns", "b", "2")), delta(fifo.Added, pod("ns", "c", "3"))}
	if !applyPanics(c, &fifo.Batch{Deltas: deltas}) {
		t.Fatal("ApplyBatch did not panic")
	}
	msgs := c.Recover()
	if len(msgs) != 1 {
		t.Fatalf("Recover sent %v, want the acknowledgement only", msgs)
	}
	if p, ok := msgs[0].Body.(*fifo.Processed); !ok || p.Count != 3 || msgs[0].To != stage.ToQueue {
		t.Fatalf("Recover sent %+v to %v", msgs[0].Body, msgs[0].To)
	}
	if s.Len() != 2 || s.LastStoreSyncResourceVersion() != "2" {
		t.Errorf("cache holds %d objects at version %q, want 2 at \"2\"", s.Len(), s.LastStoreSyncResourceVersion())
	}
}
