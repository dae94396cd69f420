package indexer

import (
	"testing"

	"k8s.io/client-go/tools/cache"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Changed wakes a waiter as the cache's version next moves, once: the
// next waiter gets a new channel.
func TestStoreChangedClosesAsTheVersionMoves(t *testing.T) {
	s := NewStore(cache.MetaNamespaceKeyFunc, nil)
	w := s.Writer()
	ch := s.Changed()
	if ch != s.Changed() {
		t.Fatal("two waiters before a move got different channels")
	}
	if closed(ch) {
		t.Fatal("closed before any move")
	}
	w.Lock()
	w.SetResourceVersion("5")
	w.Unlock()
	if !closed(ch) {
		t.Fatal("not closed once the version moved")
	}
	next := s.Changed()
	if closed(next) {
		t.Fatal("the next waiter's channel is closed before the next move")
	}
	w.Lock()
	w.SetResourceVersion("6")
	w.Unlock()
	if !closed(next) {
		t.Fatal("the next waiter's channel is not closed by the next move")
	}
}

// SubscribedChan is closed once the listener is marked subscribed, whether
// it was asked for before or after.
func TestSentSubscribedChan(t *testing.T) {
	var before Sent
	ch := before.SubscribedChan()
	if closed(ch) {
		t.Fatal("closed before the subscription")
	}
	before.MarkSubscribed()
	if !closed(ch) || !before.Subscribed.Load() {
		t.Fatal("not closed, or Subscribed not set, once subscribed")
	}
	var after Sent
	after.MarkSubscribed()
	if !closed(after.SubscribedChan()) {
		t.Fatal("asked after the subscription: not closed")
	}
}
