package shard

import (
	"context"
	"fmt"

	"github.com/asynkron/protoactor-go/cluster"
)

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
