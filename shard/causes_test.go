package shard_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/actorinformer/actorinformer/shard"
	"github.com/actorinformer/actorinformer/shard/shardtest"
)

// failingSource is a source whose lists and watches fail while fail is set
// (an API server out of reach).
type failingSource struct {
	*memServer
	fail atomic.Bool
}

var errRefused = errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")

func (f *failingSource) List(o metav1.ListOptions) (runtime.Object, error) {
	if f.fail.Load() {
		return nil, errRefused
	}
	return f.memServer.List(o)
}

func (f *failingSource) Watch(o metav1.ListOptions) (watch.Interface, error) {
	if f.fail.Load() {
		return nil, errRefused
	}
	return f.memServer.Watch(o)
}

// deniedLeases is a fake clientset with the members' leases whose
// SelfSubjectAccessReviews refuse the lease verbs in denied, and whose
// lease creates and updates fail with Forbidden while failWrites is set
// (the lease RBAC missing).
func deniedLeases(denied map[string]bool, failWrites *atomic.Bool) *fake.Clientset {
	cs := fake.NewClientset()
	shardtest.InstallLeases(cs)
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		review := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		attr := review.Spec.ResourceAttributes
		review.Status.Allowed = !(attr.Resource == "leases" && denied[attr.Verb])
		return true, review, nil
	})
	forbid := func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !failWrites.Load() {
			return false, nil, nil
		}
		return true, nil, fmt.Errorf(`leases.coordination.k8s.io is forbidden: User "system:serviceaccount:default:member" cannot %s resource "leases"`, a.GetVerb())
	}
	cs.PrependReactor("create", "leases", forbid)
	cs.PrependReactor("update", "leases", forbid)
	return cs
}

// With the lease RBAC missing, CheckSynced and Status name the requests
// the access check found refused and the last lease write's error; once
// the writes succeed, the member delivers its ranges and the write's error
// is gone from Status.
func TestProbesSayWhyLeasesFail(t *testing.T) {
	src := newMemServer()
	src.create("o1")
	var failWrites atomic.Bool
	failWrites.Store(true)
	cs := deniedLeases(map[string]bool{"create": true, "update": true}, &failWrites)
	r := runMember(t, test.NewInMemAgent(), src, shard.WithLeases(cs.CoordinationV1(), "default"),
		shard.WithAccessCheck(cs.AuthorizationV1(), schema.GroupResource{Resource: "configmaps"}, ""))
	want := []string{
		"not allowed to create leases.coordination.k8s.io in namespace default",
		"not allowed to update leases.coordination.k8s.io in namespace default",
		"the last lease write failed",
		"cannot create resource",
	}
	eventually(t, 30*time.Second, "CheckSynced naming the causes", func() string {
		err := r.inf.CheckSynced(nil)
		if err == nil {
			return "CheckSynced passed with the lease writes failing"
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				return fmt.Sprintf("CheckSynced: %v; want it to say %q", err, w)
			}
		}
		return ""
	})
	code, body := served(r.inf.CheckSynced)
	t.Logf("/readyz: %d %s", code, body)
	if causes := r.inf.Status().Causes; len(causes) != 3 {
		t.Errorf("Status().Causes: %q, want the two refused verbs and the write's error", causes)
	}

	failWrites.Store(false)
	eventually(t, 30*time.Second, "CheckSynced once the writes succeed", func() string {
		if err := r.inf.CheckSynced(nil); err != nil {
			return err.Error()
		}
		return ""
	})
	for _, c := range r.inf.Status().Causes {
		if strings.Contains(c, "lease write") {
			t.Errorf("Status().Causes still has the write's error once writes succeed: %q", c)
		}
	}
}

// With the API server out of reach for the ranges' lists, CheckSynced
// says so (CheckLive does not fail); the error is gone once a list
// succeeds.
func TestProbesSayWhyListsFail(t *testing.T) {
	src := &failingSource{memServer: newMemServer()}
	src.create("o1")
	src.fail.Store(true)
	r := runMember(t, test.NewInMemAgent(), src)
	eventually(t, 30*time.Second, "CheckSynced naming the list's error", func() string {
		err := r.inf.CheckSynced(nil)
		if err == nil || !strings.Contains(err.Error(), "the last list or watch of a range failed") || !strings.Contains(err.Error(), "connection refused") {
			return fmt.Sprintf("CheckSynced: %v", err)
		}
		return ""
	})
	if err := r.inf.CheckLive(nil); err != nil {
		t.Errorf("CheckLive while lists fail: %v; want nil, as a restart would not help", err)
	}
	src.fail.Store(false)
	eventually(t, 60*time.Second, "CheckSynced once lists succeed", func() string {
		if err := r.inf.CheckSynced(nil); err != nil {
			return err.Error()
		}
		if c := r.inf.Status().Causes; len(c) > 0 {
			return fmt.Sprintf("Status().Causes: %q", c)
		}
		return ""
	})
}

// The access check reviews the informer's kind too: a refused list or
// watch of it is named in Status().Causes, and so is a review that could
// not be made (an API server out of reach), rather than taken as allowed.
// Neither fails CheckLive: a restart mends neither.
func TestAccessCheckNamesTheKindAndFailedReviews(t *testing.T) {
	for _, tc := range []struct {
		name   string
		review func(*authorizationv1.SelfSubjectAccessReview) error
		want   []string
	}{{
		name: "kind refused",
		review: func(r *authorizationv1.SelfSubjectAccessReview) error {
			attr := r.Spec.ResourceAttributes
			r.Status.Allowed = attr.Resource != "configmaps"
			return nil
		},
		want: []string{
			"not allowed to list configmaps in namespace team-a",
			"not allowed to watch configmaps in namespace team-a",
		},
	}, {
		name:   "review fails",
		review: func(*authorizationv1.SelfSubjectAccessReview) error { return errRefused },
		want: []string{
			"cannot review whether it may create leases.coordination.k8s.io in namespace default: " + errRefused.Error(),
			"cannot review whether it may watch configmaps in namespace team-a: " + errRefused.Error(),
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			src := newMemServer()
			src.create("o1")
			cs := reviewingClient(tc.review)
			r := runMember(t, test.NewInMemAgent(), src, shard.WithLeases(cs.CoordinationV1(), "default"),
				shard.WithAccessCheck(cs.AuthorizationV1(), schema.GroupResource{Resource: "configmaps"}, "team-a"))
			eventually(t, 30*time.Second, "Status().Causes naming the refused requests", func() string {
				causes := strings.Join(r.inf.Status().Causes, "\n")
				for _, w := range tc.want {
					if !strings.Contains(causes, w) {
						return fmt.Sprintf("Status().Causes:\n%s\nwant %q", causes, w)
					}
				}
				return ""
			})
			if err := r.inf.CheckLive(nil); err != nil {
				t.Errorf("CheckLive: %v; want nil, as a restart would not help", err)
			}
		})
	}
}

// The access check reviews the list and watch of the kinds AddKind added
// too.
func TestAccessCheckNamesAnAddedKind(t *testing.T) {
	src := newMemServer()
	src.create("o1")
	cs := reviewingClient(func(r *authorizationv1.SelfSubjectAccessReview) error {
		r.Status.Allowed = r.Spec.ResourceAttributes.Resource != "secrets"
		return nil
	})
	r := newMember(t, test.NewInMemAgent(), src, shard.WithHashField(shard.Namespace), shard.WithLeases(cs.CoordinationV1(), "default"),
		shard.WithAccessCheck(cs.AuthorizationV1(), schema.GroupResource{Resource: "configmaps"}, "team-a"))
	if _, err := r.inf.AddKind(schema.GroupResource{Resource: "secrets"}, newMemServer(), &corev1.Secret{}); err != nil {
		t.Fatal(err)
	}
	r.run()
	eventually(t, 30*time.Second, "Status().Causes naming the added kind", func() string {
		causes := strings.Join(r.inf.Status().Causes, "\n")
		for _, w := range []string{"not allowed to list secrets in namespace team-a", "not allowed to watch secrets in namespace team-a"} {
			if !strings.Contains(causes, w) {
				return fmt.Sprintf("Status().Causes:\n%s\nwant %q", causes, w)
			}
		}
		if strings.Contains(causes, "configmaps") {
			return "Status().Causes name configmaps, which are allowed:\n" + causes
		}
		return ""
	})
}

// reviewingClient is a fake clientset with leases whose access reviews
// review answers (its error fails the review).
func reviewingClient(review func(*authorizationv1.SelfSubjectAccessReview) error) *fake.Clientset {
	cs := fake.NewClientset()
	shardtest.InstallLeases(cs)
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		if err := review(r); err != nil {
			return true, nil, err
		}
		return true, r, nil
	})
	return cs
}
