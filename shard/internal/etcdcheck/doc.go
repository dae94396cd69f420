// Package etcdcheck holds the tests of shard.CheckEtcd, apart from package
// shard's: the etcd client's gRPC goroutines read gRPC's global logger,
// which each protoactor cluster member's remote.Start sets without a lock,
// so in one test binary with the members of package shard's tests the race
// detector reports it.
package etcdcheck
