package shard

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// causes are what a member knows of why it may not deliver its ranges:
// requests it is not allowed to make (WithAccessCheck), and the last
// failure of a lease write and of a range's list or watch, each cleared
// by the next success. CheckSynced and Status name them.
type causes struct {
	denied   atomic.Pointer[[]string]
	leaseErr atomic.Pointer[stampedErr]
	listErr  atomic.Pointer[stampedErr]
}

type stampedErr struct {
	err error
	at  time.Time
}

func (c *causes) noteLease(err error) { c.leaseErr.Store(stamp(err)) }
func (c *causes) noteList(err error)  { c.listErr.Store(stamp(err)) }

func stamp(err error) *stampedErr {
	if err == nil {
		return nil
	}
	return &stampedErr{err: err, at: time.Now()}
}

// list returns the causes known now, worst first.
func (c *causes) list() []string {
	var out []string
	if d := c.denied.Load(); d != nil {
		out = append(out, *d...)
	}
	for _, e := range []struct {
		what string
		err  *stampedErr
	}{{"the last lease write failed", c.leaseErr.Load()}, {"the last list or watch of a range failed", c.listErr.Load()}} {
		if e.err != nil {
			out = append(out, fmt.Sprintf("%s %v ago: %v", e.what, time.Since(e.err.at).Round(time.Second), e.err.err))
		}
	}
	return out
}

// access is WithAccessCheck's: what the member checks it may do at Run.
type access struct {
	client    authorizationv1client.SelfSubjectAccessReviewsGetter
	resource  schema.GroupResource
	namespace string
}

// WithAccessCheck has the member check at Run, with
// SelfSubjectAccessReviews through client, that it may do what it needs:
// get, list, watch, create, update and delete leases in WithLeases'
// namespace, and list and watch resource (the informer's, e.g.
// {Resource: "configmaps"}) and every kind AddKind added in namespace
// ("" for all). Each request it
// may not make is logged as a warning, and named by CheckSynced's error
// and Status().Causes as long as the member runs: the member still runs,
// and delivers what it can once the permission is granted. The review
// needs no permission of its own.
func WithAccessCheck(client authorizationv1client.SelfSubjectAccessReviewsGetter, resource schema.GroupResource, namespace string) Option {
	return func(o *options) { o.access = &access{client: client, resource: resource, namespace: namespace} }
}

// checkAccess reviews the requests the member makes and records those
// refused; a review that fails is recorded as such.
func (s *Informer) checkAccess(ctx context.Context) {
	a := s.o.access
	if a == nil {
		return
	}
	lease := coordinationv1.SchemeGroupVersion.WithResource("leases")
	type request struct {
		verb, namespace string
		gvr             schema.GroupResource
	}
	var reqs []request
	for _, v := range []string{"get", "list", "watch", "create", "update", "delete"} {
		reqs = append(reqs, request{v, s.o.namespace, lease.GroupResource()})
	}
	kinds := []schema.GroupResource{a.resource}
	for _, k := range s.kinds[1:] {
		kinds = append(kinds, schema.ParseGroupResource(k.kindKey))
	}
	for _, gr := range kinds {
		for _, v := range []string{"list", "watch"} {
			reqs = append(reqs, request{v, a.namespace, gr})
		}
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.o.renewDL)
	defer cancel()
	var denied []string
	for _, r := range reqs {
		where := "in namespace " + r.namespace
		if r.namespace == "" {
			where = "in every namespace"
		}
		what := r.gvr.String()
		review, err := a.client.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: r.verb, Group: r.gvr.Group, Resource: r.gvr.Resource, Namespace: r.namespace}}}, metav1.CreateOptions{})
		switch {
		case parent.Err() != nil:
			return // the member stops
		case err != nil:
			denied = append(denied, fmt.Sprintf("cannot review whether it may %s %s %s: %v", r.verb, what, where, err))
		case !review.Status.Allowed:
			why := review.Status.Reason
			if why == "" {
				why = "no rule allows it"
			}
			denied = append(denied, fmt.Sprintf("not allowed to %s %s %s (%s)", r.verb, what, where, strings.TrimSpace(why)))
		}
	}
	for _, d := range denied {
		s.log.Warn("access check: " + d)
	}
	if denied != nil {
		s.causes.denied.Store(&denied)
	}
}
