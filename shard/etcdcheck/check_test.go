package etcdcheck_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
	"github.com/actorinformer/actorinformer/shard/etcdcheck"
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

// With no etcd at the endpoint, Check fails after the dial timeout
// with an error naming the endpoint, and at once when its context ends (a
// signal).
func TestCheckEtcdUnreachable(t *testing.T) {
	before := goleak.IgnoreCurrent()
	endpoint := "http://" + deadAddress(t)
	returned := make(chan error, 1)
	go func() {
		returned <- etcdcheck.Check(context.Background(), clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 300 * time.Millisecond})
	}()
	var err error
	select {
	case err = <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("Check did not return 30 s after its dial timeout of 300ms")
	}
	if err == nil || !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "did not answer within 300ms") {
		t.Fatalf("Check: %v; want an error naming %s and the timeout", err, endpoint)
	}
	t.Log(err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- etcdcheck.Check(ctx, clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Hour})
	}()
	cancel()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), endpoint) || !strings.Contains(err.Error(), "cancelled") {
			t.Fatalf("Check cancelled: %v; want an error naming %s and the cancellation", err, endpoint)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Check did not return once its context was cancelled")
	}

	if err := etcdcheck.Check(context.Background(), clientv3.Config{}); err == nil {
		t.Error("Check with no endpoint: no error")
	}
	// The etcd client's goroutines end with it (and before another test
	// starts a remote, which sets grpc's global logger under them).
	if err := goleak.Find(leakcheck.Options(before)...); err != nil {
		t.Error(err)
	}
}
