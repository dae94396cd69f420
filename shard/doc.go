// Package shard shares one informer among the processes of a protoactor
// cluster: each member of a group lists, watches, caches and hands to its
// handlers only the objects of the ranges it owns, fenced by a Lease of its
// own on the API server. docs/sharding.md says how it works, what it
// promises and what can break it.
//
// Ranges are placed by handover.Place (sticky, with bounded load; a range
// that moves goes to the member with room and the highest rendezvous score
// for it). Members learn who delivers what from each other's heartbeats, so
// those that heard each other compute the same owners. The protocol is
// package handover, a plain core under the stage contract, which its
// simulator drives through thousands of random joins, leaves, kills and
// message reorderings.
package shard
