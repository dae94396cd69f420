// Package shard shares one informer among the processes of a protoactor
// cluster: each member of a group lists, watches, caches and hands to its
// handlers only the objects of the ranges it owns.
//
// The 64-bit hash space of an object field (metadata.uid by default) is
// split into B virtual ranges. Each range is owned by one member of the
// group, chosen by rendezvous hashing over the members of the cluster's
// topology that run the group, so every member computes the same owner.
// A member lists and watches each range it owns with the range's shard
// selector (Kubernetes' KEP-5866 ShardSelector), so that an API server with
// the ShardedListAndWatch feature sends it only that range's objects, and
// filters on the client too, so that a server without it, or client-go's
// fake clientset, gives the same result (Status().Mode says which).
//
// When members join or leave gracefully, ranges move make-before-break:
// the new owner lists the range without calling handlers; the old owner
// stops delivering it, waits for its handlers' calls to end, drops the
// range's objects (no OnDelete: they still exist) and answers; then the new
// owner's handlers get OnAdd(obj, true) for the range's objects and every
// later change. When a member is lost (a crash), the others take its ranges
// over once the cluster's provider drops it. The protocol is package
// handover, a plain core under the stage contract, which its simulator
// drives through thousands of random joins, leaves, kills and message
// reorderings. docs/sharding.md says what it promises and what can break it.
package shard
