// Package shardtest helps test sharded informers (package shard) without
// an API server.
package shardtest

import (
	"strconv"
	"sync/atomic"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

var leases = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// InstallLeases makes client-go's fake clientset keep Leases as the API
// server does for the writes a sharded informer's fencing relies on:
// resourceVersions that grow, updates refused (409 Conflict) when the
// object changed since the version they carry, and deletes refused when
// their resourceVersion precondition no longer holds; the fake's tracker
// checks none of this. Then cs.CoordinationV1() can be given to
// shard.WithLeases. The fake's lock is held while the checks run, so a
// check and its write are one step, as on the server.
func InstallLeases(cs *fake.Clientset) {
	var rv atomic.Int64
	rv.Store(1000)
	tracker := cs.Tracker()
	current := func(ns, name string) (*coordinationv1.Lease, error) {
		obj, err := tracker.Get(leases, ns, name)
		if err != nil {
			return nil, err
		}
		return obj.(*coordinationv1.Lease), nil
	}
	cs.PrependReactor("create", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		l := a.(clienttesting.CreateAction).GetObject().(*coordinationv1.Lease)
		l.ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
		return false, nil, nil // the tracker stores it, or says it exists
	})
	cs.PrependReactor("update", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		l := a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		cur, err := current(a.GetNamespace(), l.Name)
		if err != nil {
			return true, nil, err
		}
		if l.ResourceVersion != cur.ResourceVersion {
			return true, nil, apierrors.NewConflict(leases.GroupResource(), l.Name, errChanged)
		}
		l.ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
		return false, nil, nil
	})
	cs.PrependReactor("delete", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		d := a.(clienttesting.DeleteAction)
		cur, err := current(a.GetNamespace(), d.GetName())
		if err != nil {
			return true, nil, err
		}
		if p := d.GetDeleteOptions().Preconditions; p != nil && p.ResourceVersion != nil && *p.ResourceVersion != cur.ResourceVersion {
			return true, nil, apierrors.NewConflict(leases.GroupResource(), d.GetName(), errChanged)
		}
		return false, nil, nil
	})
}

type changedError struct{}

func (changedError) Error() string {
	return "the object has been modified; please apply your changes to the latest version and try again"
}

var errChanged = changedError{}
