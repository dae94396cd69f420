//go:build !race

// StartMember starts protoactor cluster members, whose remote.Start sets
// gRPC's global logger while gRPC goroutines of an earlier member may
// still read it: the race detector cannot take it (hack/test.sh runs this
// file without -race).

package shard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/actorinformer/actorinformer/shard"
)

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
	returned := make(chan error, 1)
	go func() { returned <- shard.StartMember(ctx, c) }()
	select {
	case err = <-returned:
	case <-time.After(30 * time.Second):
		// The provider still waits: release it so that the test ends.
		close(waiting.release)
		t.Fatal("StartMember did not return 30 s after its context's deadline")
	}
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("StartMember with a provider that waits: %v; want the context's deadline", err)
	}
	close(waiting.release) // the start goes on, and fails
	<-waiting.returned
	c.Shutdown(false)
}
