package fifo

import "github.com/actorinformer/actorinformer/stage"

// The Queue's input methods: each takes one message and returns what must
// be sent because of it (see package stage). After each, the next *Batch,
// if deltas are queued and none is in flight, goes to stage.ToIndexer with
// Request, so that the indexer can answer with *Processed. The returned
// slice is valid until the next input.

// Deltas queues the watch deltas m carries (see add) and recycles m: the
// queue owns it (see NewDeltas), so the caller must not touch it after.
func (q *Queue) Deltas(m *Deltas) []stage.Msg {
	q.out.Reset()
	q.add(m.Items)
	recycle(m)
	return q.next()
}

// Replace queues a list or relist (see replace) and takes ownership of
// m.Items. It returns a *Listed for the indexer (with Request, so that it
// learns the queue), then the next batch.
func (q *Queue) Replace(m *Replace) []stage.Msg {
	q.out.Reset()
	q.replace(m.Items, m.ResourceVersion, m.ListTrace)
	q.out.Request(stage.ToIndexer, listed)
	return q.next()
}

// Resync queues a Sync delta for every cached key with nothing pending (see
// resync).
func (q *Queue) Resync() []stage.Msg {
	q.out.Reset()
	q.resync()
	return q.next()
}

// Processed acknowledges the in-flight batch (see done), whoever sends it.
func (q *Queue) Processed(m *Processed) []stage.Msg {
	q.out.Reset()
	q.done(m.Count)
	return q.next()
}

// Started is the input of a (re)started shell: the queue may hold deltas
// with nothing in flight (its actor restarted after a panic), and no other
// message may come to move them on.
func (q *Queue) Started() []stage.Msg {
	q.out.Reset()
	return q.next()
}

// listed is the one Listed value sent.
var listed = &Listed{}

// next queues the next batch, if any, and returns the input's messages.
func (q *Queue) next() []stage.Msg {
	if b := q.pop(); b != nil {
		q.out.Request(stage.ToIndexer, b)
	}
	return q.out.Msgs()
}
