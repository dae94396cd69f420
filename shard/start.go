package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// CheckEtcd asks the etcd cluster at cfg's endpoints for its members and
// returns nil once one endpoint answers, or an error naming the endpoints
// and why, after cfg.DialTimeout (5 s if unset), or as soon as ctx ends. Call it before
// c.StartMember() with protoactor's etcd provider: the provider's etcd
// calls have no deadline, so with no etcd to answer StartMember waits for
// ever, logs nothing and ignores the process's signals.
func CheckEtcd(ctx context.Context, cfg clientv3.Config) error {
	if len(cfg.Endpoints) == 0 {
		return errors.New("shard: no etcd endpoint")
	}
	timeout := cfg.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop() // its errors are in the one returned
	}
	cfg.Context = ctx
	cli, err := clientv3.New(cfg)
	if err != nil {
		return fmt.Errorf("shard: etcd at %s: %w", strings.Join(cfg.Endpoints, ", "), err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Any endpoint may answer: the client's balancer picks one that is up.
	_, err = cli.MemberList(ctx)
	if err == nil {
		return nil
	}
	why := fmt.Sprintf("did not answer within %v", timeout)
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.DeadlineExceeded) {
		why = "not reached before the start was cancelled"
	}
	return fmt.Errorf("shard: etcd at %s %s (%v): the cluster's provider cannot register this member there", strings.Join(cfg.Endpoints, ", "), why, err)
}

// StartMember runs c.StartMember() and returns once it has returned, with
// the error it panics with (protoactor's providers panic when they cannot
// register the member), or with an error once ctx ends first (a signal, a
// deadline). In that last case the start goes on in the background and the
// cluster member cannot be used: exit the process.
func StartMember(ctx context.Context, c *cluster.Cluster) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				if err, ok := r.(error); ok {
					done <- fmt.Errorf("shard: the cluster member did not start: %w", err)
				} else {
					done <- fmt.Errorf("shard: the cluster member did not start: %v", r)
				}
			}
		}()
		c.StartMember()
		done <- nil
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("shard: the cluster member had not started when its start was given up (%w): its provider may be waiting for a store it cannot reach", context.Cause(ctx))
	}
}
