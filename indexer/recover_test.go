package indexer

import (
	"bytes"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
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
	c.Step(b)
	return false
}

// TestCoreRecoverSendsAppliedPart: when ApplyBatch panics (here in the
// mutation detector, after the write of the delta it was fed), Recover
// sends the notifications of every delta written to the cache before the
// panic, the delta that panicked included, as one batch to every
// subscriber with their counters raised; it logs an error saying so.
// Started then applies the rest of the batch, sends its notifications and
// acknowledges the whole batch. Tested across a chunk boundary, so that
// progress made in an earlier chunk and in the chunk that panicked both
// count.
func TestCoreRecoverSendsAppliedPart(t *testing.T) {
	var logs bytes.Buffer
	tel := telemetry.New(telemetry.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	s := NewStore(nil, nil)
	det := &panicAt{}
	c := NewCore(s.Writer(), Config{Clock: newFakeClock(), Telemetry: tel, MutationDetector: det})
	if msgs := c.Step(Lifecycle(stage.Restarting)); len(msgs) != 0 {
		t.Fatalf("Recover with no batch in progress sent %v", msgs)
	}
	p1 := new(counts)
	c.subscribe(p1.subscribe(1))
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

	got, processed := split(t, c.Step(Lifecycle(stage.Restarting)))
	if processed != nil {
		t.Fatalf("Recover acknowledged the batch (%v): the rest is still to apply", processed)
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
	if p1.pending() != panicOn || p1.backlog() != panicOn {
		t.Errorf("Pending = %d, Backlog = %d; want %d each", p1.pending(), p1.backlog(), panicOn)
	}
	if s.Len() != panicOn {
		t.Errorf("cache holds %d objects, want %d", s.Len(), panicOn)
	}
	if rv, want := s.LastStoreSyncResourceVersion(), strconv.Itoa(100+panicOn-1); rv != want {
		t.Errorf("cache version %q, want %q (the last delta written)", rv, want)
	}
	if l := logs.String(); strings.Count(l, "level=ERROR") != 1 || !strings.Contains(l, "panicked") || !strings.Contains(l, "partly applied") || !strings.Contains(l, "key=ns/p"+strconv.Itoa(panicOn-1)) {
		t.Errorf("logged %q, want one error saying the batch panicked at ns/p%d and was partly applied", l, panicOn-1)
	}

	// The new actor's Started applies the rest and acknowledges the batch.
	got, processed = split(t, c.Step(Lifecycle(stage.Started)))
	if processed == nil || processed.Count != len(deltas) {
		t.Fatalf("acknowledgement %v, want Processed{Count: %d}", processed, len(deltas))
	}
	if len(got) != 2 || got[0] != got[1] {
		t.Fatalf("Started: got %d batches, want the same one to each of the 2 subscribers", len(got))
	}
	rest := got[0].Items
	if len(rest) != total+1-panicOn {
		t.Fatalf("Started: %d notifications, want the %d deltas after the one that panicked", len(rest), total+1-panicOn)
	}
	for i, it := range rest[:len(rest)-1] {
		if it.Type != NotifyAdd || !it.InitialList || key(it.New) != "ns/p"+strconv.Itoa(panicOn+i) {
			t.Fatalf("rest %d: %v %v initial=%v", i, it.Type, key(it.New), it.InitialList)
		}
	}
	if last := rest[len(rest)-1]; last.Type != NotifyDelete || key(last.New) != "ns/p0" {
		t.Fatalf("last notification %v %v, want the delete of ns/p0", last.Type, key(last.New))
	}
	if p1.pending() != total || p1.backlog() != total+1 {
		t.Errorf("Pending = %d, Backlog = %d; want %d and %d", p1.pending(), p1.backlog(), total, total+1)
	}
	if s.Len() != total-1 || s.LastStoreSyncResourceVersion() != "999" {
		t.Errorf("cache holds %d objects at %q, want %d at \"999\"", s.Len(), s.LastStoreSyncResourceVersion(), total-1)
	}

	// The batch is done: Recover and Started do nothing more, and the next
	// batch is applied as usual.
	if msgs := c.Step(Lifecycle(stage.Restarting)); len(msgs) != 0 {
		t.Fatalf("second Recover sent %v", msgs)
	}
	if msgs := c.Step(Lifecycle(stage.Started)); len(msgs) != 0 {
		t.Fatalf("second Started sent %v", msgs)
	}
	msgs := c.Step(&fifo.Batch{Deltas: []fifo.Delta{delta(fifo.Updated, pod("ns", "p1", "2000"))}})
	if len(msgs) != 3 {
		t.Fatalf("next batch: %d messages, want 2 notifications and Processed", len(msgs))
	}
	if n := msgs[0].Body.(*Notifications); len(n.Items) != 1 || n.Items[0].Type != NotifyUpdate {
		t.Errorf("next batch: %+v", n.Items)
	}
	if p1.backlog() != total+2 {
		t.Errorf("Backlog = %d, want %d", p1.backlog(), total+2)
	}
}

// split checks that msgs are notifications to listeners followed by at
// most one acknowledgement to the queue, and returns both.
func split(t *testing.T, msgs []stage.Msg) (got []*Notifications, processed *fifo.Processed) {
	t.Helper()
	for i, m := range msgs {
		switch b := m.Body.(type) {
		case *Notifications:
			if m.To.Kind != stage.Listener || processed != nil {
				t.Errorf("message %d: notifications to %v after the acknowledgement %v", i, m.To, processed)
			}
			got = append(got, b)
		case *fifo.Processed:
			if m.To != stage.ToQueue || processed != nil {
				t.Errorf("Processed sent to %v, or twice", m.To)
			}
			processed = b
		default:
			t.Errorf("message %d: unexpected %T", i, m.Body)
		}
	}
	return got, processed
}

// TestCoreRecoverNoSubscriber: with no subscriber, Recover sends nothing,
// and Started applies the rest of the batch, skipping the delta that
// panicked, and acknowledges it.
func TestCoreRecoverNoSubscriber(t *testing.T) {
	s := NewStore(nil, nil)
	c := NewCore(s.Writer(), Config{Clock: newFakeClock(), MutationDetector: &panicAt{at: 2}})
	deltas := []fifo.Delta{delta(fifo.Added, pod("ns", "a", "1")), delta(fifo.Added, pod("ns", "b", "2")), delta(fifo.Added, pod("ns", "c", "3"))}
	if !applyPanics(c, &fifo.Batch{Deltas: deltas}) {
		t.Fatal("ApplyBatch did not panic")
	}
	if msgs := c.Step(Lifecycle(stage.Restarting)); len(msgs) != 0 {
		t.Fatalf("Recover sent %v, want nothing", msgs)
	}
	msgs := c.Step(Lifecycle(stage.Started))
	if len(msgs) != 1 {
		t.Fatalf("Started sent %v, want the acknowledgement only", msgs)
	}
	if p, ok := msgs[0].Body.(*fifo.Processed); !ok || p.Count != 3 || msgs[0].To != stage.ToQueue {
		t.Fatalf("Started sent %+v to %v", msgs[0].Body, msgs[0].To)
	}
	if s.Len() != 3 || s.LastStoreSyncResourceVersion() != "3" {
		t.Errorf("cache holds %d objects at version %q, want 3 at \"3\"", s.Len(), s.LastStoreSyncResourceVersion())
	}
}

// TestCoreRecoverTwice: when the rest panics too, the next restart goes on
// after that delta.
func TestCoreRecoverTwice(t *testing.T) {
	s := NewStore(nil, nil)
	det := &panicAt{at: 1}
	c := NewCore(s.Writer(), Config{Clock: newFakeClock(), MutationDetector: det})
	b := new(counts)
	c.subscribe(b.subscribe(1))
	deltas := []fifo.Delta{delta(fifo.Added, pod("ns", "a", "1")), delta(fifo.Added, pod("ns", "b", "2")), delta(fifo.Added, pod("ns", "c", "3"))}
	if !applyPanics(c, &fifo.Batch{Deltas: deltas}) {
		t.Fatal("ApplyBatch did not panic")
	}
	var keys []string
	collect := func(msgs []stage.Msg) (acked bool) {
		got, processed := split(t, msgs)
		for _, n := range got {
			for _, it := range n.Items {
				keys = append(keys, key(it.New))
			}
		}
		return processed != nil && processed.Count == 3
	}
	collect(c.Step(Lifecycle(stage.Restarting)))
	det.calls, det.at = 0, 1 // b panics too
	started := func() (acked, panicked bool) {
		defer func() { panicked = recover() != nil }()
		return collect(c.Step(Lifecycle(stage.Started))), false
	}
	if _, panicked := started(); !panicked {
		t.Fatal("Started did not panic on b")
	}
	collect(c.Step(Lifecycle(stage.Restarting)))
	if acked, panicked := started(); panicked || !acked {
		t.Fatalf("second Started: acked %v, panicked %v", acked, panicked)
	}
	if !slices.Equal(keys, []string{"ns/a", "ns/b", "ns/c"}) || b.backlog() != 3 {
		t.Fatalf("notified %v with backlog %d, want a, b, c and 3", keys, b.backlog())
	}
}
