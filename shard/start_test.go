package shard_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
	"github.com/actorinformer/actorinformer/shard"
)

// deadAddress is a loopback address nothing listens on: a port that was
// free a moment ago.
func deadAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// With no etcd at the endpoint, CheckEtcd fails after the dial timeout
// with an error naming the endpoint, and at once when its context ends (a
// signal).
func TestCheckEtcdUnreachable(t *testing.T) {
	before := goleak.IgnoreCurrent()
	endpoint := "http://" + deadAddress(t)
	err := shard.CheckEtcd(context.Background(), clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "did not answer within 300ms") {
		t.Fatalf("CheckEtcd: %v; want an error naming %s and the timeout", err, endpoint)
	}
	t.Log(err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- shard.CheckEtcd(ctx, clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Hour})
	}()
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "cancelled") {
			t.Fatalf("CheckEtcd cancelled: %v; want an error naming %s and the cancellation", err, endpoint)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("CheckEtcd did not return once its context was cancelled")
	}

	if err := shard.CheckEtcd(context.Background(), clientv3.Config{}); err == nil {
		t.Error("CheckEtcd with no endpoint: no error")
	}
	// The etcd client's goroutines end with it (and before another test
	// starts a remote, which sets grpc's global logger under them).
	if err := goleak.Find(leakcheck.Options(before)...); err != nil {
		t.Error(err)
	}
}

// blockingProvider is a cluster provider whose StartMember waits until
// release is closed, then fails, as protoactor's etcd provider does with
// an etcd it cannot reach: it waits for ever, then (once its client is
// closed) returns an error, which cluster.StartMember turns into a panic.
type blockingProvider struct{ release, returned chan struct{} }

func newBlockingProvider() *blockingProvider {
	return &blockingProvider{release: make(chan struct{}), returned: make(chan struct{})}
}

func (p *blockingProvider) StartMember(*cluster.Cluster) error {
	defer close(p.returned)
	<-p.release
	return errors.New("etcd unreachable")
}
func (p *blockingProvider) StartClient(*cluster.Cluster) error { return nil }
func (p *blockingProvider) Shutdown(bool) error                { return nil }

// StartMember returns the provider's error, not a panic, when it fails,
// and gives up once its context ends while the provider still waits.
func TestStartMemberHonoursContext(t *testing.T) {
	// Run one start after the other: protoactor's remote.Start sets grpc's
	// global logger, unguarded, while another remote's goroutines log.
	failing := newBlockingProvider()
	close(failing.release)
	c := cluster.New(quietSystem(), cluster.Configure("shard-test", failing, disthash.New(), remote.Configure("127.0.0.1", 0)))
	err := shard.StartMember(context.Background(), c)
	if err == nil || !strings.Contains(err.Error(), "etcd unreachable") {
		t.Fatalf("StartMember with a provider that fails: %v; want its error", err)
	}
	c.Shutdown(false)

	waiting := newBlockingProvider()
	c = cluster.New(quietSystem(), cluster.Configure("shard-test", waiting, disthash.New(), remote.Configure("127.0.0.1", 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = shard.StartMember(ctx, c)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("StartMember with a provider that waits: %v; want the context's deadline", err)
	}
	close(waiting.release) // the start goes on, and fails
	<-waiting.returned
	c.Shutdown(false)
}
