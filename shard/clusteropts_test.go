package shard

import (
	"testing"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
)

// ClusterOptions slows the gossip down and leaves its heartbeat's
// expiration ten intervals away.
func TestClusterOptions(t *testing.T) {
	def := cluster.Configure("c", test.NewTestProvider(test.NewInMemAgent()), disthash.New(), remote.Configure("127.0.0.1", 0))
	cfg := cluster.Configure("c", test.NewTestProvider(test.NewInMemAgent()), disthash.New(), remote.Configure("127.0.0.1", 0), ClusterOptions()...)
	if cfg.GossipInterval != DefaultGossipInterval || cfg.GossipInterval <= def.GossipInterval {
		t.Fatalf("gossip interval %v, protoactor's %v; want %v", cfg.GossipInterval, def.GossipInterval, DefaultGossipInterval)
	}
	if cfg.HeartbeatExpiration != def.HeartbeatExpiration || cfg.HeartbeatExpiration < 10*cfg.GossipInterval {
		t.Fatalf("heartbeat expiration %v with gossip every %v; want protoactor's %v, at least 10 intervals", cfg.HeartbeatExpiration, cfg.GossipInterval, def.HeartbeatExpiration)
	}
}

// RemoteOption adds its window settings to the remote's dial and server
// options, keeping those given before (protoactor's insecure credentials
// among them).
func TestRemoteOption(t *testing.T) {
	def := remote.Configure("127.0.0.1", 0)
	cfg := remote.Configure("127.0.0.1", 0, RemoteOption())
	if len(cfg.DialOptions) != len(def.DialOptions)+2 || len(cfg.ServerOptions) != len(def.ServerOptions)+2 {
		t.Fatalf("dial options %d, server options %d; want protoactor's (%d, %d) and two more each",
			len(cfg.DialOptions), len(cfg.ServerOptions), len(def.DialOptions), len(def.ServerOptions))
	}
}
