package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
)

// running is one member run by a test.
type running struct {
	inf    *shard.Informer
	c      *cluster.Cluster
	prov   *test.Provider
	cancel context.CancelFunc
	done   chan struct{}
	run    func()
}

// runMember starts a member (with leases of its own unless opts has
// others) and runs it until the test ends.
func runMember(t *testing.T, agent *test.InMemAgent, src cache.ListerWatcher, opts ...shard.Option) *running {
	t.Helper()
	r := newMember(t, agent, src, opts...)
	r.run()
	return r
}

// newMember makes a member, to run with run.
func newMember(t *testing.T, agent *test.InMemAgent, src cache.ListerWatcher, opts ...shard.Option) *running {
	t.Helper()
	c, prov := startCluster(agent)
	opts = append(append(testLeases(), shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler)))), opts...)
	inf, err := shard.New(c, "configmaps", src, &corev1.ConfigMap{}, opts...)
	if err != nil {
		stopCluster(c, prov)
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{inf: inf, c: c, prov: prov, cancel: cancel, done: make(chan struct{})}
	var once sync.Once
	r.run = func() { once.Do(func() { go func() { defer close(r.done); inf.RunWithContext(ctx) }() }) }
	t.Cleanup(func() {
		cancel()
		r.run() // if it never ran: Run returns at once
		<-r.done
		if inf.Cluster().ActorSystem.IsStopped() {
			// Shut down by the test: its provider's departure now would
			// race protoactor's gossip loop (BlockList.IsBlocked reads
			// without its lock).
			return
		}
		_ = prov.Shutdown(true)
		inf.Cluster().Shutdown(false)
	})
	return r
}

func served(check shard.Check) (int, string) {
	rec := httptest.NewRecorder()
	check.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

// CheckSynced is nil while the member delivers every range it owns;
// CheckLive never fails through a normal life, the graceful leave
// included.
func TestHealthChecks(t *testing.T) {
	src := newMemServer()
	for i := range 50 {
		src.create(fmt.Sprintf("o%d", i))
	}
	c, prov := startCluster(test.NewInMemAgent())
	defer stopCluster(c, prov)
	inf, err := shard.New(c, "configmaps", src, &corev1.ConfigMap{},
		append(testLeases(), shard.WithInformerOptions(actors.WithLogger(slog.New(slog.DiscardHandler))))...)
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.CheckLive(nil); err != nil {
		t.Errorf("CheckLive before Run: %v", err)
	}
	if err := inf.CheckSynced(nil); err == nil {
		t.Error("CheckSynced before Run: nil")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	eventually(t, 30*time.Second, "CheckSynced", func() string {
		if err := inf.CheckSynced(nil); err != nil {
			return err.Error()
		}
		return ""
	})
	if code, body := served(inf.CheckSynced); code != http.StatusOK || body != "ok" {
		t.Errorf("CheckSynced served %d %q, want 200 ok", code, body)
	}
	if n := len(inf.Ranges()); n != 16 {
		t.Errorf("synced with %d ranges delivered, want 16", n)
	}
	cancel()
	for leaving := true; leaving; {
		select {
		case <-done:
			leaving = false
		case <-time.After(5 * time.Millisecond):
		}
		if err := inf.CheckLive(nil); err != nil {
			t.Fatalf("CheckLive during the graceful leave: %v", err)
		}
	}
	if code, _ := served(inf.CheckLive); code != http.StatusOK {
		t.Errorf("CheckLive after Run returned: %d", code)
	}
	if code, body := served(inf.CheckSynced); code != http.StatusInternalServerError || !strings.Contains(body, "stopped") {
		t.Errorf("CheckSynced after Run returned: %d %q, want 500 saying it stopped", code, body)
	}
}

// A cluster member shut down under a running informer can reach no other
// member: the informer stops calling handlers, gives up (Run returns), and
// CheckLive says so.
func TestClusterShutDownUnderRun(t *testing.T) {
	src := newMemServer()
	for i := range 50 {
		src.create(fmt.Sprintf("o%d", i))
	}
	var calls atomic.Int64
	r := runMember(t, test.NewInMemAgent(), src)
	if _, err := r.inf.AddEventHandler(countCalls(&calls)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "synced", func() string {
		if err := r.inf.CheckSynced(nil); err != nil {
			return err.Error()
		}
		return ""
	})
	r.c.Shutdown(false) // the provider still lists it
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its cluster member was shut down")
	}
	if err := r.inf.CheckLive(nil); err == nil || !strings.Contains(err.Error(), "shut down") {
		t.Errorf("CheckLive: %v; want an error saying the cluster member was shut down", err)
	}
	before := calls.Load()
	src.create("after")
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load() - before; n != 0 {
		t.Errorf("%d handler calls after it gave up", n)
	}
	if len(r.inf.Ranges()) != 0 {
		t.Errorf("delivers %v after it gave up", r.inf.Ranges())
	}
}

// A member that its provider dropped (here it leaves the in-memory
// agent; on Kubernetes, its pod stopped being ready) is never shown again
// on its cluster member: without WithRejoin it gives up, and CheckLive
// fails, so that a restart makes it a new cluster member.
func TestDroppedMemberWithoutRejoinGivesUp(t *testing.T) {
	agent := test.NewInMemAgent()
	src := newMemServer()
	r := runMember(t, agent, src)
	eventually(t, 30*time.Second, "synced", func() string { return errString(r.inf.CheckSynced(nil)) })
	agent.DeregisterService(r.c.ActorSystem.ID)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not return after the provider dropped the member: %+v", r.inf.Status())
	}
	if err := r.inf.CheckLive(nil); err == nil || !strings.Contains(err.Error(), "WithRejoin") {
		t.Errorf("CheckLive: %v; want an error saying it cannot rejoin without WithRejoin", err)
	}
}

func errString(err error) string {
	if err != nil {
		return err.Error()
	}
	return ""
}

type callCounter struct{ n *atomic.Int64 }

func countCalls(n *atomic.Int64) callCounter { return callCounter{n} }
func (c callCounter) OnAdd(any, bool)        { c.n.Add(1) }
func (c callCounter) OnUpdate(any, any)      { c.n.Add(1) }
func (c callCounter) OnDelete(any)           { c.n.Add(1) }
