package fifo

import (
	"fmt"
	"strings"
	"testing"

	"github.com/actorinformer/actorinformer/stage"
)

// msgsString renders an input's messages as "to/mode/type(n)" for
// comparisons, n being a batch's length.
func msgsString(msgs []stage.Msg) string {
	s := make([]string, len(msgs))
	for i, m := range msgs {
		s[i] = fmt.Sprintf("%v/%v/%T", m.To.Kind, m.Mode, m.Body)
		if b, ok := m.Body.(*Batch); ok {
			s[i] += fmt.Sprintf("(%d)", len(b.Deltas))
		}
	}
	return strings.Join(s, " ")
}

func deltasMsg(ds ...Delta) *Deltas {
	m := NewDeltas(len(ds))
	m.Items = append(m.Items, ds...)
	return m
}

// TestQueueMsgs checks the messages each input returns: whom to, how, and
// what.
func TestQueueMsgs(t *testing.T) {
	const listedMsg = "indexer/send/*fifo.Listed"
	const syncedMsg = "informer/send/*fifo.Synced" // an add before any list syncs at once
	batch := func(n int) string { return fmt.Sprintf("indexer/send/*fifo.Batch(%d)", n) }
	inFlight := func(q *Queue) { q.add([]Delta{added("x", 1)}); q.pop() }
	for _, tc := range []struct {
		name  string
		known *known
		setup func(q *Queue)
		input func(q *Queue) []stage.Msg
		want  string
	}{
		{"deltas, idle", nil, nil,
			func(q *Queue) []stage.Msg { return q.Step(deltasMsg(added("a", 1), updated("a", 2))) }, syncedMsg + " " + batch(2)},
		{"deltas, idle, synced", nil, func(q *Queue) { q.add([]Delta{added("x", 1)}); q.pop(); q.done(1) },
			func(q *Queue) []stage.Msg { return q.Step(deltasMsg(added("a", 1), updated("a", 2))) }, batch(2)},
		{"deltas, batch in flight", nil, inFlight,
			func(q *Queue) []stage.Msg { return q.Step(deltasMsg(added("a", 1))) }, ""},
		{"deltas all dropped", nil, nil,
			func(q *Queue) []stage.Msg { return q.Step(deltasMsg(deleted("a", 1))) }, syncedMsg},
		{"first replace", nil, nil,
			func(q *Queue) []stage.Msg {
				return q.Step(&Replace{Items: []Delta{replaced("a", 1)}, ResourceVersion: "5"})
			}, listedMsg + " " + batch(2)},
		{"empty first replace", nil, nil,
			func(q *Queue) []stage.Msg { return q.Step(&Replace{ResourceVersion: "5"}) }, listedMsg + " " + batch(1)},
		{"replace, batch in flight", nil, inFlight,
			func(q *Queue) []stage.Msg {
				return q.Step(&Replace{Items: []Delta{replaced("a", 1)}, ResourceVersion: "5"})
			}, listedMsg},
		{"relist, whole", newKnown(o("a", 1), o("b", 1)), func(q *Queue) { q.maxBatch = 1 },
			func(q *Queue) []stage.Msg {
				return q.Step(&Replace{Items: []Delta{replaced("a", 2)}, ResourceVersion: "5"})
			}, listedMsg + " " + batch(3)}, // tombstone b, a, bookmark
		{"resync", newKnown(o("a", 1), o("b", 1)), nil,
			func(q *Queue) []stage.Msg { return q.Step(&Resync{}) }, batch(2)},
		{"resync, nothing cached", nil, nil,
			func(q *Queue) []stage.Msg { return q.Step(&Resync{}) }, ""},
		{"resync, batch in flight", newKnown(o("a", 1)), inFlight,
			func(q *Queue) []stage.Msg { return q.Step(&Resync{}) }, ""},
		{"processed, more queued", nil, func(q *Queue) { inFlight(q); q.add([]Delta{added("b", 1)}) },
			func(q *Queue) []stage.Msg { return q.Step(&Processed{Count: 1}) }, batch(1)},
		{"processed, drained", nil, inFlight,
			func(q *Queue) []stage.Msg { return q.Step(&Processed{Count: 1}) }, ""},
		{"processed, nothing in flight", nil, func(q *Queue) { q.add([]Delta{added("b", 1)}) },
			// Logged and ignored, but what is queued goes out.
			func(q *Queue) []stage.Msg { return q.Step(&Processed{Count: 1}) }, batch(1)},
		{"started, queued", nil, func(q *Queue) { q.add([]Delta{added("a", 1), added("b", 1)}) },
			func(q *Queue) []stage.Msg { return q.Step(Lifecycle(stage.Started)) }, batch(2)},
		{"started, batch in flight", nil, func(q *Queue) { inFlight(q); q.add([]Delta{added("b", 1)}) },
			func(q *Queue) []stage.Msg { return q.Step(Lifecycle(stage.Started)) }, ""},
		{"started, empty", nil, nil,
			func(q *Queue) []stage.Msg { return q.Step(Lifecycle(stage.Started)) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{}
			if tc.known != nil {
				cfg.Known = tc.known
			}
			q := New(cfg)
			if tc.setup != nil {
				tc.setup(q)
			}
			if got := msgsString(tc.input(q)); got != tc.want {
				t.Fatalf("messages %q, want %q", got, tc.want)
			}
			// The next input starts from an empty outbox.
			if got := msgsString(q.Step(Lifecycle(stage.Started))); got != "" {
				t.Fatalf("then Started returned %q", got)
			}
		})
	}
}

// TestQueueMsgsChain drives the queue as a shell would, feeding each
// returned batch back as Processed, and checks the deltas arrive in order
// and the queue syncs.
func TestQueueMsgsChain(t *testing.T) {
	q := New(Config{MaxBatch: 2})
	var got []Delta
	pending := []func() []stage.Msg{
		func() []stage.Msg {
			return q.Step(&Replace{Items: []Delta{replaced("a", 1), replaced("b", 1), replaced("c", 1)}, ResourceVersion: "1"})
		},
		func() []stage.Msg { return q.Step(deltasMsg(updated("a", 2))) },
		func() []stage.Msg { return q.Step(deltasMsg(deleted("b", 2))) },
	}
	var acks []*Processed
	for len(pending) > 0 || len(acks) > 0 {
		var out []stage.Msg
		// Inputs first, so that the deltas arrive while batches are in
		// flight (b's delete while b is, so it is kept).
		if len(pending) > 0 {
			out = pending[0]()
			pending = pending[1:]
		} else {
			out = q.Step(acks[0])
			acks = acks[1:]
		}
		for _, m := range out {
			if _, ok := m.Body.(*Synced); ok && m.To == stage.ToInformer {
				continue
			}
			if m.To != stage.ToIndexer || m.Mode != stage.Send {
				t.Fatalf("message %T to %v by %v", m.Body, m.To, m.Mode)
			}
			if b, ok := m.Body.(*Batch); ok {
				got = append(got, b.Deltas...)
				acks = append(acks, &Processed{Count: len(b.Deltas)})
			}
		}
	}
	want := []Delta{
		initial(replaced("a", 1)), initial(replaced("b", 1)), initial(replaced("c", 1)), initial(bm("1")),
		updated("a", 2), deleted("b", 2),
	}
	wantDeltas(t, got, want)
	if !q.HasSynced() || q.Len() != 0 {
		t.Fatalf("HasSynced %v, Len %d", q.HasSynced(), q.Len())
	}
}

// TestQueueDeltasRecycles checks that the queue gives a *Deltas back to the
// pool, without its objects.
func TestQueueDeltasRecycles(t *testing.T) {
	q := New(Config{})
	m := deltasMsg(added("a", 1))
	items := m.Items[:1]
	q.Step(m)
	if len(m.Items) != 0 || items[0] != (Delta{}) {
		t.Fatalf("message not recycled: %d items, first %+v", len(m.Items), items[0])
	}
}
