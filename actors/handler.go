package actors

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"

	"k8s.io/client-go/tools/cache"
)

// ContextEventHandler is a cache.ResourceEventHandler whose methods receive a
// context carrying the handler's span: spans started from it (and requests
// made with it through an instrumented client) join the delta's trace.
//
// The context is also cancelled when the informer stops.
type ContextEventHandler interface {
	OnAdd(ctx context.Context, obj any, isInInitialList bool)
	OnUpdate(ctx context.Context, oldObj, newObj any)
	OnDelete(ctx context.Context, obj any)
}

// ContextEventHandlerFuncs adapts functions to ContextEventHandler; nil
// functions are skipped.
type ContextEventHandlerFuncs struct {
	AddFunc    func(ctx context.Context, obj any, isInInitialList bool)
	UpdateFunc func(ctx context.Context, oldObj, newObj any)
	DeleteFunc func(ctx context.Context, obj any)
}

// OnAdd calls AddFunc if it is not nil.
func (f ContextEventHandlerFuncs) OnAdd(ctx context.Context, obj any, isInInitialList bool) {
	if f.AddFunc != nil {
		f.AddFunc(ctx, obj, isInInitialList)
	}
}

// OnUpdate calls UpdateFunc if it is not nil.
func (f ContextEventHandlerFuncs) OnUpdate(ctx context.Context, oldObj, newObj any) {
	if f.UpdateFunc != nil {
		f.UpdateFunc(ctx, oldObj, newObj)
	}
}

// OnDelete calls DeleteFunc if it is not nil.
func (f ContextEventHandlerFuncs) OnDelete(ctx context.Context, obj any) {
	if f.DeleteFunc != nil {
		f.DeleteFunc(ctx, obj)
	}
}

// plainHandler lets a cache.ResourceEventHandler be called like a
// ContextEventHandler; the context is dropped.
type plainHandler struct{ h cache.ResourceEventHandler }

func (p plainHandler) OnAdd(_ context.Context, obj any, initial bool) { p.h.OnAdd(obj, initial) }
func (p plainHandler) OnUpdate(_ context.Context, o, n any)           { p.h.OnUpdate(o, n) }
func (p plainHandler) OnDelete(_ context.Context, obj any)            { p.h.OnDelete(obj) }

// NamedHandler gives h a name for its spans, metrics, logs and Stats;
// otherwise a handler is named after its type or where its functions live.
// A Coalesced handler stays coalesced.
func NamedHandler(name string, h cache.ResourceEventHandler) cache.ResourceEventHandler {
	if inner, ok := uncoalesced(h); ok {
		return coalescedHandler{namedHandler{ResourceEventHandler: inner, name: name}}
	}
	return namedHandler{ResourceEventHandler: h, name: name}
}

// NamedContextHandler is NamedHandler for a ContextEventHandler.
func NamedContextHandler(name string, h ContextEventHandler) ContextEventHandler {
	if inner, ok := uncoalescedContext(h); ok {
		return coalescedContextHandler{namedContextHandler{ContextEventHandler: inner, name: name}}
	}
	return namedContextHandler{ContextEventHandler: h, name: name}
}

type namedHandler struct {
	cache.ResourceEventHandler
	name string
}

func (n namedHandler) HandlerName() string { return n.name }

type namedContextHandler struct {
	ContextEventHandler
	name string
}

func (n namedContextHandler) HandlerName() string { return n.name }

// handlerName names a handler for spans, metrics and logs, in the spirit of
// client-go's own naming: the handler's type, or where its functions live.
func handlerName(h any) string {
	switch f := h.(type) {
	case Named:
		return f.HandlerName()
	case cache.ResourceEventHandlerFuncs:
		return funcsName(f.AddFunc, f.UpdateFunc, f.DeleteFunc)
	case *cache.ResourceEventHandlerFuncs:
		return funcsName(f.AddFunc, f.UpdateFunc, f.DeleteFunc)
	case cache.ResourceEventHandlerDetailedFuncs:
		return funcsName(f.AddFunc, f.UpdateFunc, f.DeleteFunc)
	case *cache.ResourceEventHandlerDetailedFuncs:
		return funcsName(f.AddFunc, f.UpdateFunc, f.DeleteFunc)
	case ContextEventHandlerFuncs:
		return funcsName(f.AddFunc, f.UpdateFunc, f.DeleteFunc)
	case *ContextEventHandlerFuncs:
		return funcsName(f.AddFunc, f.UpdateFunc, f.DeleteFunc)
	}
	t := reflect.TypeOf(h)
	if t == nil {
		return "nil"
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() != "" && t.Name() != "" {
		return t.PkgPath() + "." + t.Name()
	}
	return fmt.Sprintf("%T", h)
}

func funcsName(fs ...any) string {
	for _, f := range fs {
		v := reflect.ValueOf(f)
		if v.Kind() == reflect.Func && !v.IsNil() {
			if fn := runtime.FuncForPC(v.Pointer()); fn != nil {
				return fn.Name()
			}
		}
	}
	return "funcs"
}

// WrapHandler returns a handler that calls mw's handler in h's place, for
// a middleware around a handler's calls: it keeps h's name (for spans,
// metrics and logs) and whether h is Coalesced. h is a
// cache.ResourceEventHandler or a ContextEventHandler; mw receives the
// handler h stands for (the one a Coalesced or named h wraps), as a
// ContextEventHandler.
func WrapHandler(h any, mw func(ContextEventHandler) ContextEventHandler) (ContextEventHandler, error) {
	var inner ContextEventHandler
	coalesce := false
	switch v := h.(type) {
	case nil:
		return nil, errors.New("actorinformer: nil event handler")
	case ContextEventHandler:
		inner, coalesce = uncoalescedContext(v)
	case cache.ResourceEventHandler:
		var plain cache.ResourceEventHandler
		plain, coalesce = uncoalesced(v)
		inner = plainHandler{plain}
	default:
		return nil, fmt.Errorf("actorinformer: %T is not an event handler", h)
	}
	out := NamedContextHandler(handlerName(h), mw(inner))
	if coalesce {
		out = CoalescedContext(out)
	}
	return out, nil
}

// UnwrapHandler returns the handler a named, Coalesced or wrapped handler
// stands for (the value the caller wrote), or h itself: for looking up
// optional interfaces on it.
func UnwrapHandler(h any) any {
	for {
		switch v := h.(type) {
		case coalescedHandler:
			h = v.ResourceEventHandler
		case coalescedContextHandler:
			h = v.ContextEventHandler
		case namedHandler:
			h = v.ResourceEventHandler
		case namedContextHandler:
			h = v.ContextEventHandler
		case plainHandler:
			h = v.h
		default:
			return h
		}
	}
}
