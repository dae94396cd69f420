package shard

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Check is a health check with the signature of controller-runtime's
// healthz.Checker: CheckLive and CheckSynced are Checks, so that
// mgr.AddHealthzCheck("shard", inf.CheckLive) plugs them into a manager.
// As an http.Handler it answers 200 "ok", or 500 with the reason, as
// controller-runtime's /healthz and /readyz do.
type Check func(*http.Request) error

// ServeHTTP runs the check.
func (c Check) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := c(r); err != nil {
		http.Error(w, "unhealthy: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprint(w, "ok")
}

// CheckLive is a liveness check: it fails once the member gave up on its
// group for good (Err): fenced after the cluster's provider dropped it,
// with no way to rejoin (no WithRejoin, or a WithRejoin that failed), its
// cluster member shut down under it, or its actors could not start. A
// restart makes it a new cluster member, which can join. It does not fail
// while the member starts, waits for members with other settings to leave,
// rejoins after a fence, or leaves gracefully (nor after it has left): on
// Kubernetes it can also be the pod's readiness check, which must not
// wait for ranges (docs/sharding.md).
func (s *Informer) CheckLive(*http.Request) error {
	if reason := s.Err(); reason != "" {
		return errors.New(reason)
	}
	return nil
}

// CheckSynced is a readiness check: nil while the member runs in its group
// and delivers every range it owns. It fails before Run, while the member
// discovers the group, lists a range it took, waits for members with other
// settings to leave, rejoins after a fence, leaves, and after Run has
// returned. Unlike HasSynced it does not stay true. Do not make it a
// pod's readiness probe with protoactor's k8s provider: a pod is a member
// only while it is ready, and it owns ranges only once it is a member
// (docs/sharding.md).
func (s *Informer) CheckSynced(*http.Request) error {
	if reason := s.Err(); reason != "" {
		return errors.New("gave up on its group: " + reason)
	}
	if reason := s.Waiting(); reason != "" {
		return errors.New("waiting to join its group: " + reason)
	}
	s.mu.Lock()
	started, stopped := s.started, s.stopped
	s.mu.Unlock()
	switch {
	case !started:
		return errors.New("not running")
	case stopped:
		return errors.New("stopped")
	}
	st := s.protocol.Load()
	switch {
	case st == nil || st.Done:
		return s.withCauses("joining its group")
	case st.Leaving:
		return errors.New("leaving its group")
	case st.Discovering:
		return s.withCauses("discovering its group")
	}
	owned := 0
	for _, r := range st.Ranges {
		if r.Owner == st.Self {
			owned++
		}
	}
	delivered := len(*s.delivered.Load())
	if !st.Settled || delivered != owned {
		return s.withCauses(fmt.Sprintf("delivers %d of the %d ranges it owns", delivered, owned))
	}
	return nil
}

// withCauses is the error what, followed by what keeps the member from
// delivering, as far as it knows (Status().Causes).
func (s *Informer) withCauses(what string) error {
	if c := s.causes.list(); len(c) > 0 {
		what += "; " + strings.Join(c, "; ")
	}
	return errors.New(what)
}
