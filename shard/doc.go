// Package shard shares one informer among the processes of a protoactor
// cluster: each member of a group lists, watches, caches and hands to its
// handlers only the objects of the ranges it owns.
//
// The 64-bit hash space of an object field (metadata.uid by default) is
// split into B virtual ranges. Each range is owned by one member of the
// group's view (the members of the cluster's topology that run the group
// with the same settings), by sticky placement with bounded load
// (handover.Place): a range stays with the member that delivers it while
// that member is within its share, and only the surplus and the ranges of
// members that left move, each to the member with room and the highest
// rendezvous score for it. Members learn who delivers what from each
// other's heartbeats, so those that heard each other compute the same
// owners. A member lists and watches each range it owns with the range's
// shard selector (Kubernetes' KEP-5866 ShardSelector), so that an API
// server with the ShardedListAndWatch feature sends it only that range's
// objects, and filters on the client too, so that a server without it, or
// client-go's fake clientset, gives the same result (Status().Mode says
// which).
//
// Each member is fenced by a Lease of its own on the API server
// (WithLeases): it calls handlers only while its claim is valid, and the
// others take its ranges without its answer only once its lease is void.
// When members join or leave gracefully, ranges move make-before-break:
// the new owner syncs the range (from a copy of the old owner's cache, or
// a list) without calling handlers; the old owner stops delivering it,
// waits for its handlers' calls to end, drops the range's objects (no
// OnDelete: they still exist) and answers with what its handlers were
// given; then the new owner's handlers get OnAdd(obj, true) for the
// range's objects and every later change. When a member is lost (a crash,
// a pause past its lease), the others take its ranges over, listing them,
// once its lease is void. The protocol is package handover, a plain core
// under the stage contract, which its simulator drives through thousands
// of random joins, leaves, kills and message reorderings. docs/sharding.md
// says what it promises and what can break it.
package shard
