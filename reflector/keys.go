package reflector

// watchKeys gives the deltas of watch events their cache keys
// (cache.MetaNamespaceKeyFunc's "namespace/name") without a new string per
// event: an update to an object the watch has already keyed reuses that
// string. It builds "namespace/name" in a buffer it keeps, and looks the
// bytes up in a map of the keys it made, which does not allocate; only a
// key it has not seen is copied into a new string.
//
// A key is found by its bytes, so a reused string is always equal to the
// one cache.MetaNamespaceKeyFunc would return, and strings are immutable:
// the fifo, the cache and its concurrent readers may keep it. The map holds
// the keys of the objects the watch added or changed since the last list
// (or WatchList sync), minus those it deleted; reset empties it when a
// sync replaces the cache, so that objects gone from the server without a
// Deleted event (a relist's deletes) leave it too.
//
// Only the reflector's Machine uses it (not safe for concurrent use).
type watchKeys struct {
	buf  []byte
	seen map[string]string
}

// key returns namespace/name (name alone when namespace is empty). deleted
// says the object leaves the cache: its key is forgotten.
func (k *watchKeys) key(namespace, name string, deleted bool) string {
	if namespace == "" {
		return name // no new string to save
	}
	k.buf = append(append(append(k.buf[:0], namespace...), '/'), name...)
	if s, ok := k.seen[string(k.buf)]; ok { // the lookup copies nothing
		if deleted {
			delete(k.seen, s)
		}
		return s
	}
	s := string(k.buf)
	if !deleted {
		if k.seen == nil {
			k.seen = map[string]string{}
		}
		k.seen[s] = s
	}
	return s
}

// reset forgets every key (a sync replaced the cache) and frees the map.
func (k *watchKeys) reset() { k.seen = nil }

// len returns how many keys are kept (tests).
func (k *watchKeys) len() int { return len(k.seen) }
