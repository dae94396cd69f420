package actors

import (
	"context"
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
	case interface{ HandlerName() string }:
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
