package actors

import (
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// Object is what a Typed informer holds: an API object with a name and a
// namespace (client-go's cache.Object, which typed handlers need).
type Object interface {
	cache.Object
	runtime.Object
}

var _ cache.TypedSharedIndexInformer[*corev1.Pod] = Typed[*corev1.Pod]{}

// NewTyped creates an informer of T objects (T a pointer type such as
// *corev1.Pod) as NewSharedIndexInformerWithOptions does, and returns its
// typed view: the counterpart of client-go's
// cache.NewTypedSharedIndexInformer[T](cache.NewSharedIndexInformerWithOptions(...)).
// Its Lister reports not-found errors for the resource of options.Identifier
// (or WithResource).
func NewTyped[T Object](lw cache.ListerWatcher, options cache.SharedIndexInformerOptions, opts ...Option) Typed[T] {
	inf := NewSharedIndexInformerWithOptions(lw, newObject[T](), options, opts...)
	return Typed[T]{SharedIndexInformer: inf, gvr: inf.opts.gvr}
}

// AddTypedEventHandler adds a type-safe handler, as client-go's
// TypedSharedIndexInformer: with no options it is AddEventHandler, with one
// AddEventHandlerWithOptions; more than one is an error. A delete reaches
// the handler as a cache.DeletedObject[T], whose FinalStateUnknown is set for
// a tombstone.
func (t Typed[T]) AddTypedEventHandler(handler cache.TypedResourceEventHandler[T], options ...cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	var o cache.HandlerOptions
	switch len(options) {
	case 0:
	case 1:
		o = options[0]
	default:
		return nil, fmt.Errorf("at most one HandlerOptions may be passed, got %d", len(options))
	}
	if handler == nil {
		return nil, fmt.Errorf("actorinformer: nil event handler")
	}
	return t.AddEventHandlerWithOptions(typedHandler[T]{h: handler}, o)
}

// AddTypedIndexers adds type-safe index functions.
func (t Typed[T]) AddTypedIndexers(indexers cache.TypedIndexers[T]) error {
	return t.AddIndexers(cache.TypedIndexersToIndexers(indexers))
}

// GetTypedIndexer returns a type-safe view of the cache.
func (t Typed[T]) GetTypedIndexer() cache.TypedIndexer[T] {
	return cache.NewTypedSharedIndexInformer[T](t.SharedIndexInformer).GetTypedIndexer()
}

// typedHandler calls a TypedResourceEventHandler as client-go's
// typedResourceEventHandler does, and names it after the typed handler.
type typedHandler[T Object] struct {
	h cache.TypedResourceEventHandler[T]
}

func (h typedHandler[T]) OnAdd(obj any, isInInitialList bool) { h.h.OnAdd(obj.(T), isInInitialList) }

func (h typedHandler[T]) OnUpdate(oldObj, newObj any) { h.h.OnUpdate(oldObj.(T), newObj.(T)) }

func (h typedHandler[T]) OnDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		if tomb.Obj == nil {
			h.h.OnDelete(cache.DeletedObject[T]{FinalStateUnknown: &tomb})
			return
		}
		h.h.OnDelete(cache.DeletedObject[T]{OptionalObj: tomb.Obj.(T), FinalStateUnknown: &tomb})
		return
	}
	h.h.OnDelete(cache.DeletedObject[T]{OptionalObj: obj.(T)})
}

// HandlerName names the handler after the typed one: its HandlerName, the
// functions of a Typed...Funcs struct, or its type.
func (h typedHandler[T]) HandlerName() string {
	if n, ok := h.h.(Named); ok {
		return n.HandlerName()
	}
	v := reflect.ValueOf(h.h)
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct {
		var fs []any
		for _, f := range []string{"AddFunc", "UpdateFunc", "DeleteFunc"} {
			if fv := v.FieldByName(f); fv.IsValid() && fv.Kind() == reflect.Func {
				fs = append(fs, fv.Interface())
			}
		}
		if len(fs) > 0 {
			return funcsName(fs...)
		}
	}
	return handlerName(h.h)
}
