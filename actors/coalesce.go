package actors

import "k8s.io/client-go/tools/cache"

// Coalesced asks the informer to coalesce h's notifications: while h is
// behind, its listener keeps at most one pending notification per key (two
// when the object was deleted and recreated: the delete, then the add),
// merged so that h still sees a correct story:
//
//   - the latest object;
//   - an update's old object is the one h last saw;
//   - no update or delete of an object h never saw added, and every
//     delete of one it saw (cache.DeletedFinalStateUnknown tombstones
//     included): when a relist finds an object recreated (h is then
//     sent, as by client-go, an update from the old UID to the new one)
//     and the new object is deleted before h had that update, h gets the
//     delete of the object it saw, as a cache.DeletedFinalStateUnknown
//     holding it, as client-go tells a handler of an object a relist
//     found gone;
//   - a deleted and recreated object is a delete then an add, never an
//     update; an add keeps its isInInitialList flag.
//
// What a slow handler's listener holds is then bounded by the number of
// keys rather than by the number of changes; h sees fewer, later calls
// (an update's old and new objects may be several versions apart). The
// informer's backlog gauge and Stats' Backlog count the pending
// notifications; Stats' Delivered counts those merged into another too.
//
// Given to another informer (client-go's), the result is h: its methods
// call h's.
func Coalesced(h cache.ResourceEventHandler) cache.ResourceEventHandler {
	if h == nil {
		return nil
	}
	return coalescedHandler{h}
}

// CoalescedContext is Coalesced for a ContextEventHandler. The handler span
// of a merged call continues the latest traced change it stands for.
func CoalescedContext(h ContextEventHandler) ContextEventHandler {
	if h == nil {
		return nil
	}
	return coalescedContextHandler{h}
}

type coalescedHandler struct{ cache.ResourceEventHandler }

func (c coalescedHandler) HandlerName() string { return handlerName(c.ResourceEventHandler) }

type coalescedContextHandler struct{ ContextEventHandler }

func (c coalescedContextHandler) HandlerName() string { return handlerName(c.ContextEventHandler) }

// uncoalesced returns the handler h wraps and whether it asked to be
// coalesced.
func uncoalesced(h cache.ResourceEventHandler) (cache.ResourceEventHandler, bool) {
	if c, ok := h.(coalescedHandler); ok {
		return c.ResourceEventHandler, true
	}
	return h, false
}

func uncoalescedContext(h ContextEventHandler) (ContextEventHandler, bool) {
	if c, ok := h.(coalescedContextHandler); ok {
		return c.ContextEventHandler, true
	}
	return h, false
}

var (
	_ cache.ResourceEventHandler = coalescedHandler{}
	_ ContextEventHandler        = coalescedContextHandler{}
)
