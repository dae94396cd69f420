// Package shardpb holds the protobuf messages that the members of a sharded
// informer group send each other over protoactor's remote.
package shardpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative shard.proto
