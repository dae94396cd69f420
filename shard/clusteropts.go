package shard

import (
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
)

// DefaultGossipInterval is the gossip interval ClusterOptions sets.
const DefaultGossipInterval = 2 * time.Second

// ClusterOptions are the protoactor cluster settings a member of a group
// needs no more than, for cluster.Configure:
//
//	cluster.Configure(name, provider, lookup, remoteConfig, shard.ClusterOptions()...)
//
// A group learns its members from the cluster's provider and fences them
// with leases; it uses none of protoactor's gossip, which still sends each
// member's state to the others every GossipInterval (300 ms by default:
// about half of an idle member's CPU time) and blocks a member not heard
// for HeartbeatExpiration (20 s, left as it is). These options gossip every
// DefaultGossipInterval, ten intervals within the expiration. A cluster
// whose grains rely on gossiped state (its topology consensus) may keep
// protoactor's interval.
//
// cluster.Shutdown(false) does not stop the gossip loop: it ends at its next
// tick, up to an interval later. A program that checks for leaked
// goroutines calls c.Gossip.Shutdown() first.
func ClusterOptions() []cluster.ConfigOption {
	return []cluster.ConfigOption{func(c *cluster.Config) {
		c.GossipInterval = DefaultGossipInterval
	}}
}

// RemoteWindow is the flow-control window RemoteOption gives each stream
// and connection of the remote.
const RemoteWindow = 1 << 20

// RemoteOption is the protoactor remote setting a member of a group gains
// from, for remote.Configure:
//
//	remote.Configure(host, port, shard.RemoteOption())
//
// By default gRPC estimates each connection's bandwidth-delay product: for
// data it receives it sends a ping, which its peer answers. A group sends
// a few small messages a second (heartbeats, gossip), so each one costs a
// ping and its answer too: twice the writes and wake-ups. Fixed windows of
// RemoteWindow turn the estimation off, with room for several of a warm
// handover's chunks. The option adds to the dial and server options given
// before it (remote.WithDialOptions and remote.WithServerOptions replace
// those lists, so give them first).
func RemoteOption() remote.ConfigOption {
	return func(c *remote.Config) {
		c.DialOptions = append(c.DialOptions, WindowDialOptions()...)
		c.ServerOptions = append(c.ServerOptions, grpc.InitialWindowSize(RemoteWindow), grpc.InitialConnWindowSize(RemoteWindow))
	}
}

// WindowDialOptions are RemoteOption's dial options: fixed windows of
// RemoteWindow, with no bandwidth estimation. The etcd provider's client
// can take them too (its lease keep-alive gets an answer every third of
// the TTL): an idle member then made about a tenth fewer reads.
//
//	clientv3.Config{Endpoints: …, DialOptions: shard.WindowDialOptions(), Logger: etcdcheck.EtcdLogger(nil)}
func WindowDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(RemoteWindow), grpc.WithInitialConnWindowSize(RemoteWindow)}
}
