package listener

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/telemetry"
)

// Coalescer holds a Coalesced handler's pending notifications: at most one
// per key, two when the object was recreated (the delete of the one the
// handler saw, then the add of the new one), keys in the order their first
// pending notification arrived. What it holds is thus bounded by the number
// of keys, however many changes arrive while the handler is behind.
//
// Merging keeps the handler's story right (PendingKey.merge): it gets the
// latest object; an update's old object is the one it last saw; it gets no
// update or delete of an object it never saw added, and every delete of one
// it saw. It is a plain struct, not safe for concurrent use.
type Coalescer struct {
	keyFunc cache.KeyFunc
	byKey   map[string]*PendingKey
	queue   []*PendingKey
	head    int
	// held counts the notifications held.
	held int
}

// PendingKey is what is pending for one key: n[:len], in order.
type PendingKey struct {
	key   string
	keyed bool // false for an object without a key: never merged
	n     [2]indexer.Notification
	len   uint8
	// calls is the view of n[:len] sent to the handler runner.
	calls Calls
}

func NewCoalescer(keyFunc cache.KeyFunc) *Coalescer {
	return &Coalescer{keyFunc: keyFunc, byKey: map[string]*PendingKey{}}
}

// Len returns the number of notifications held.
func (c *Coalescer) Len() int { return c.held }

// Each calls f for each key with something pending, oldest first.
func (c *Coalescer) Each(f func(e *PendingKey)) {
	for _, e := range c.queue[c.head:] {
		if e.len > 0 {
			f(e)
		}
	}
}

// Items returns the notifications pending for the key, in order. They
// belong to e.
func (e *PendingKey) Items() []indexer.Notification { return e.n[:e.len] }

// Initial returns the number of initial-list notifications e stands for:
// they stay counted (the handler's HasSynced) until they are delivered.
func (e *PendingKey) Initial() int64 { return e.flags() }

// flags counts the initial-list notifications e holds.
func (e *PendingKey) flags() int64 {
	var n int64
	for i := range e.len {
		if e.n[i].InitialList {
			n++
		}
	}
	return n
}

// add merges it into what is pending for its key. It returns how many
// notifications left the backlog (it, when it was folded into a pending
// one; a pending add and it, when they cancel out) and how many of those
// were initial-list ones.
func (c *Coalescer) add(it *indexer.Notification) (done, initial int64) {
	key, err := c.keyFunc(it.New)
	var e *PendingKey
	if err == nil {
		e = c.byKey[key]
	}
	if e == nil {
		e = &PendingKey{key: key, keyed: err == nil}
		if e.keyed {
			c.byKey[key] = e
		}
		c.queue = append(c.queue, e)
	}
	before := e.len
	done, initial = e.merge(*it)
	c.held += int(e.len) - int(before)
	return done, initial
}

// pop removes and returns the oldest key with something pending; nil when
// nothing is.
func (c *Coalescer) pop() *PendingKey {
	for c.head < len(c.queue) {
		e := c.queue[c.head]
		c.queue[c.head] = nil
		c.head++
		if e.keyed {
			delete(c.byKey, e.key)
		}
		if e.len == 0 { // its add and delete cancelled out
			continue
		}
		c.held -= int(e.len)
		if c.held == 0 {
			c.reset() // what is left has cancelled out
		} else if c.head >= 1024 && 2*c.head >= len(c.queue) {
			c.queue = c.queue[:copy(c.queue, c.queue[c.head:])]
			clear(c.queue[len(c.queue):cap(c.queue)])
			c.head = 0
		}
		return e
	}
	c.reset()
	return nil
}

func (c *Coalescer) reset() {
	clear(c.byKey)
	clear(c.queue)
	c.queue = c.queue[:0]
	c.head = 0
	c.held = 0
}

// merge folds it into the notifications pending for its key, so that the
// handler, given them in order, ends where it would have had it been given
// every notification:
//
//	pending          + add(x)      + update(o,x)    + delete(x)
//	(none)             add(x)        update(o,x)      delete(x)
//	add(a)             add(x) *      add(x)           (none)
//	update(o,a)        update(o,x) * update(o,x)      delete(x) †
//	delete(d)          delete(d),    delete(d),       delete(x) *
//	                   add(x)        add(x) *
//	delete(d),add(a)   delete(d),    delete(d),       delete(d)
//	                   add(x) *      add(x)
//
// † When the pending update changes the object's UID (a relist found the
// object recreated: the indexer then sends, as client-go's, an update from
// the old object to the new one), the handler never saw the object the
// delete is of: it gets the delete of the one it saw, as a
// cache.DeletedFinalStateUnknown holding it, as client-go tells a handler
// of an object a relist found gone. So a handler never gets the delete of
// a UID it did not see.
//
// A pending add keeps its isInInitialList flag. The cases marked * do not
// happen in the stream the indexer sends (an add of an object the handler
// will hold, an update or delete of one it will not); they are merged so
// that the handler still ends with the latest object. Add and delete stay
// apart (delete then add) even for the same UID: the handler is told the
// object went away. It returns what add returns.
func (e *PendingKey) merge(it indexer.Notification) (done, initial int64) {
	// Routing is done: a resync's update is an update like another here.
	it.Sync = false
	held, flags := e.len, e.flags()
	if it.InitialList {
		flags++
	}
	defer func() {
		// What left: the notifications no longer held, and the
		// initial-list flags no longer held (two folded into one add
		// count once).
		done, initial = int64(held)+1-int64(e.len), flags-e.flags()
	}()
	if e.len == 0 {
		e.push(it)
		return
	}
	last := &e.n[e.len-1]
	switch it.Type {
	case indexer.NotifyAdd:
		if last.Type == indexer.NotifyDelete {
			e.push(it)
		} else {
			fold(last, &it)
		}
	case indexer.NotifyUpdate:
		if last.Type == indexer.NotifyDelete {
			it.Type, it.Old = indexer.NotifyAdd, nil
			e.push(it)
		} else {
			fold(last, &it)
		}
	case indexer.NotifyDelete:
		switch last.Type {
		case indexer.NotifyAdd:
			// Never seen: the add and the delete both go.
			*last = indexer.Notification{}
			e.len--
		case indexer.NotifyUpdate:
			// The handler saw the update's old object: it is told of its
			// delete, with the final state, unless the update changed
			// the UID (†).
			if old := last.Old; objectUID(old) != objectUID(it.New) {
				it.New = cache.DeletedFinalStateUnknown{Key: e.key, Obj: old}
			}
			*last = it
		case indexer.NotifyDelete:
			fold(last, &it)
		}
	}
	return
}

func (e *PendingKey) push(it indexer.Notification) {
	e.n[e.len] = it
	e.len++
}

// fold merges a later notification of the same object into n: n keeps its
// type (and an add its isInInitialList flag, an update its old object) and
// takes the latest object. The trace is the latest traced one; the
// received stamp the earliest (the event age is that of the oldest change
// the call stands for).
func fold(n, later *indexer.Notification) {
	n.New = later.New
	if later.Trace != nil {
		n.Trace = later.Trace
	}
	if n.Received == (telemetry.Stamp{}) {
		n.Received = later.Received
	}
	n.InitialList = n.InitialList || later.InitialList
}

// objectUID returns obj's UID, looking through a tombstone; "" when it has no
// metadata.
func objectUID(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return string(m.GetUID())
}
