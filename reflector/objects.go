package reflector

import (
	"fmt"
	"reflect"
	"runtime/debug"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1beta1 "k8s.io/apimachinery/pkg/apis/meta/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"go.opentelemetry.io/otel/trace"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/telemetry"
)

// What the reflector does with each object it lists or watches: the type
// checks client-go makes (accept), the transform, the key, the delta and
// its root span (delta); an object that fails is dropped, logged and
// counted with one of the Drop* reasons.

// Drop reasons passed to telemetry.Metrics.Drop.
const (
	DropWrongType   = "wrong_type" // Go type or (unstructured) GVK differs from the expected one, or a Table
	DropNilObject   = "nil_object" // the event carried no object
	DropNoMeta      = "no_meta"    // the object has no ObjectMeta
	DropTransform   = "transform"  // the TransformFunc failed or returned nil
	DropNoKey       = "no_key"     // no cache key could be computed
	DropUnknownType = "unknown_event_type"
)

// accept applies client-go's checks to a watch event's object; it returns
// the object's metadata, or false after logging and counting the drop.
func (m *Machine) accept(ev *watch.Event) (metav1.Object, bool) {
	obj := ev.Object
	if m.s.expectedType != nil && reflect.TypeOf(obj) != m.s.expectedType {
		m.dropType(ev, fmt.Errorf("expected type %v, got %T", m.s.expectedType, obj))
		return nil, false
	}
	if isNil(obj) {
		m.drop(DropNilObject, string(ev.Type), nil)
		return nil, false
	}
	if m.s.expectedGVK != nil {
		if gvk := objectGVK(obj); gvk != *m.s.expectedGVK {
			m.dropType(ev, fmt.Errorf("expected gvk %v, got %v", *m.s.expectedGVK, gvk))
			return nil, false
		}
	}
	if isUnsupportedTableObject(obj) {
		m.dropType(ev, fmt.Errorf("unsupported gvk %v", objectGVK(obj)))
		return nil, false
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		m.drop(DropNoMeta, string(ev.Type), err)
		return nil, false
	}
	return acc, true
}

func (m *Machine) dropType(ev *watch.Event, err error) {
	m.drop(DropWrongType, string(ev.Type), err)
}

func (m *Machine) drop(reason, event string, err error) {
	m.s.tel.Metrics.Drop(reason)
	m.s.log.Error("reflector dropped an object", "informer", m.s.name, "type", m.s.typeDesc, "reason", reason, "event", event, "err", err)
}

// callTransform runs the user's transform, turning a panic into an error:
// the object is then dropped like one the transform rejects, and the
// stream goes on.
func (m *Machine) callTransform(obj runtime.Object) (o any, err error) {
	defer func() {
		if r := recover(); r != nil {
			o, err = nil, fmt.Errorf("transform panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return m.s.cfg.Transform(obj)
}

// delta transforms obj and keys it. acc is obj's metadata, used for the
// root span only.
func (m *Machine) delta(t fifo.DeltaType, obj runtime.Object, acc metav1.Object, event string, at time.Time, link trace.SpanContext) (fifo.Delta, bool) {
	var o any = obj
	if m.s.cfg.Transform != nil {
		var err error
		o, err = m.callTransform(obj)
		if err == nil && isNil(o) {
			err = fmt.Errorf("transform returned nil")
		}
		if err != nil {
			m.drop(DropTransform, event, err)
			return fifo.Delta{}, false
		}
	}
	var key string
	// The key is cache.DeletionHandlingMetaNamespaceKeyFunc(o). For an
	// object with metadata (obj, or what the transform made of it: a
	// tombstone or an ExplicitKey has none), it is namespace/name,
	// computed here without a second metadata lookup, and for a watch
	// event reused from the object's earlier events (watchKeys).
	ka := acc
	if m.s.cfg.Transform != nil {
		ka, _ = o.(metav1.Object)
	}
	switch {
	case ka == nil:
		var err error
		if key, err = cache.DeletionHandlingMetaNamespaceKeyFunc(o); err != nil {
			m.drop(DropNoKey, event, err)
			return fifo.Delta{}, false
		}
	case t == fifo.Replaced:
		// A list's or WatchList's object: its key is new to watchKeys,
		// which the sync empties.
		key = ka.GetName()
		if ns := ka.GetNamespace(); ns != "" {
			key = ns + "/" + key
		}
	default:
		key = m.keys.key(ka.GetNamespace(), ka.GetName(), t == fifo.Deleted)
	}
	d := fifo.Delta{Type: t, Key: key, Object: o, Received: m.stamp}
	if m.s.tracing && m.s.tel.Choose(telemetry.DeltaInfo{Type: t.CacheType(), Key: key, Object: o, ResourceVersion: acc.GetResourceVersion()}) {
		d.Trace = m.s.tel.StartDelta(t.String(), telemetry.ObjectMeta{
			Namespace:       acc.GetNamespace(),
			Name:            acc.GetName(),
			UID:             string(acc.GetUID()),
			ResourceVersion: acc.GetResourceVersion(),
			Annotations:     acc.GetAnnotations(),
		}, at, link)
	}
	return d, true
}

// isNil reports whether v is nil or a nil pointer (or other nil-able kind)
// in an interface: calling methods on such objects panics.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

var unsupportedTableGVK = map[schema.GroupVersionKind]bool{
	metav1beta1.SchemeGroupVersion.WithKind("Table"): true,
	metav1.SchemeGroupVersion.WithKind("Table"):      true,
}

// isUnsupportedTableObject: informers do not take objects in Table format
// (client-go #132926).
func isUnsupportedTableObject(obj runtime.Object) bool {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetKind() != "Table" {
		return false
	}
	return unsupportedTableGVK[u.GroupVersionKind()]
}

func isUnsupportedTableListObject(obj runtime.Object) (bool, schema.GroupVersionKind) {
	u, ok := obj.(*unstructured.UnstructuredList)
	if !ok {
		return false, schema.GroupVersionKind{}
	}
	gvk := u.GroupVersionKind()
	return unsupportedTableGVK[gvk], gvk
}

// objectGVK reads obj's GVK without trusting GetObjectKind to be non-nil.
func objectGVK(obj runtime.Object) schema.GroupVersionKind {
	ok := obj.GetObjectKind()
	if isNil(ok) {
		return schema.GroupVersionKind{}
	}
	return ok.GroupVersionKind()
}
