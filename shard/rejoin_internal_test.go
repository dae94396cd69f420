package shard

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
)

// A rejoin tries WithRejoin's function again 1, 2, 4, 8 and 16 s after a
// failure, a panic being one; the first success ends the tries, and after
// the sixth failure the last error is returned.
func TestNewClusterTriesAgain(t *testing.T) {
	made := &cluster.Cluster{}
	for _, c := range []struct {
		name    string
		outcome func(attempt int) (*cluster.Cluster, error)
		want    []time.Duration
		err     string
	}{
		{"an error, a panic, then a cluster member", func(attempt int) (*cluster.Cluster, error) {
			switch attempt {
			case 1:
				return nil, errors.New("provider out of reach")
			case 2:
				panic("no member registered")
			}
			return made, nil
		}, []time.Duration{0, time.Second, 3 * time.Second}, ""},
		{"failures only", func(attempt int) (*cluster.Cluster, error) {
			if attempt == 6 {
				panic("the last")
			}
			return nil, errors.New("provider out of reach")
		}, []time.Duration{0, 1 * time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second, 31 * time.Second}, "making the cluster member panicked: the last"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var at []time.Duration
				s := &Informer{shared: &shared{log: slog.New(slog.DiscardHandler), o: options{rejoin: func(context.Context) (*cluster.Cluster, error) {
					at = append(at, time.Since(start))
					return c.outcome(len(at))
				}}}}
				got, err := s.newCluster(context.Background())
				if !slices.Equal(at, c.want) {
					t.Errorf("attempts at %v, want %v", at, c.want)
				}
				if c.err == "" && (err != nil || got != made) {
					t.Errorf("newCluster: %v, %v; want the cluster member made", got, err)
				}
				if c.err != "" && (err == nil || err.Error() != c.err || got != nil) {
					t.Errorf("newCluster: %v, %v; want no cluster member and %q", got, err, c.err)
				}
			})
		})
	}
}
