// Package etcdcheck checks that an etcd answers before protoactor's etcd
// provider registers a cluster member there: the provider's etcd calls
// have no deadline, so with no etcd to answer c.StartMember() waits for
// ever, logs nothing and ignores the process's signals. EtcdLogger writes
// the etcd client's log to slog or klog. The package is apart from package
// shard so that a member that does not use etcd does not link its client.
package etcdcheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Check asks the etcd cluster at cfg's endpoints for its members and
// returns nil once one endpoint answers, or an error naming the endpoints
// and why, after cfg.DialTimeout (5 s if unset), or as soon as ctx ends.
// Call it before c.StartMember() (or shard.StartMember) with protoactor's
// etcd provider.
func Check(ctx context.Context, cfg clientv3.Config) error {
	if len(cfg.Endpoints) == 0 {
		return errors.New("etcdcheck: no etcd endpoint")
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
		return fmt.Errorf("etcdcheck: etcd at %s: %w", strings.Join(cfg.Endpoints, ", "), err)
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
	return fmt.Errorf("etcdcheck: etcd at %s %s (%v): the cluster's provider cannot register this member there", strings.Join(cfg.Endpoints, ", "), why, err)
}
