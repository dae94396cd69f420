package shard

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/bits"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/client-go/tools/cache"
)

// HashField is the object field whose 64-bit FNV-1a hash places an object
// in a range, as Kubernetes' shard selectors (KEP-5866) hash it.
type HashField string

const (
	// UID hashes metadata.uid: objects spread evenly; the default.
	UID HashField = "object.metadata.uid"
	// Namespace hashes metadata.namespace: a namespace's objects stay on one
	// member. A member refuses it for a cluster-scoped kind, whose objects
	// would all hash alike (Err says so, and Run returns).
	Namespace HashField = "object.metadata.namespace"
)

// Range is one of a group's Count virtual ranges of the 64-bit hash space:
// [Start, End), with End() 2^64 for the last one.
type Range struct {
	Index, Count int
}

// Start is the range's first hash.
func (r Range) Start() uint64 { return boundary(r.Index, r.Count) }

// endHex is the range's exclusive end as a selector's hex bound.
func (r Range) endHex() string {
	if r.Index == r.Count-1 {
		return "0x10000000000000000"
	}
	return fmt.Sprintf("0x%016x", boundary(r.Index+1, r.Count))
}

// Contains reports whether hash falls in the range.
func (r Range) Contains(hash uint64) bool { return rangeOf(hash, r.Count) == r.Index }

// String is "3/16".
func (r Range) String() string { return fmt.Sprintf("%d/%d", r.Index, r.Count) }

// Requirement is the range as a shard selector requirement on field.
func (r Range) Requirement(field HashField) sharding.ShardRangeRequirement {
	return sharding.ShardRangeRequirement{Key: string(field), Start: fmt.Sprintf("0x%016x", r.Start()), End: r.endHex()}
}

// boundary is range i's start out of n: ceil(i * 2^64 / n), so that a hash
// h is in range floor(h * n / 2^64) (rangeOf).
func boundary(i, n int) uint64 {
	if i <= 0 {
		return 0
	}
	q, _ := bits.Div64(uint64(i), uint64(n-1), uint64(n))
	return q
}

// rangeOf is the index of the range of n that holds hash.
func rangeOf(hash uint64, n int) int {
	hi, _ := bits.Mul64(hash, uint64(n))
	return int(hi)
}

// Hash is the hash of s, as the API server's shard selectors compute it.
func Hash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// checkScope refuses to hash a cluster-scoped kind by namespace: its
// objects have none, so every one would fall in one range, on one member.
// It lists one object of each kind; a list that fails or finds none checks
// nothing.
func (s *Informer) checkScope(ctx context.Context) string {
	if s.o.field != Namespace {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.renewDL)
	defer cancel()
	for _, k := range s.kinds {
		list, err := cache.ToListerWithContext(k.lw).ListWithContext(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			continue
		}
		why := ""
		_ = meta.EachListItem(list, func(it runtime.Object) error {
			if m, err := meta.Accessor(it); err == nil && m.GetNamespace() == "" {
				why = fmt.Sprintf("hashing by namespace, but the informer's objects have none (%q: a cluster-scoped kind), so every one would fall in one range; hash them by uid (WithHashField(UID))", m.GetName())
				if k.kindKey != "" {
					why = fmt.Sprintf("hashing by namespace, but the objects of kind %s have none (%q: a cluster-scoped kind), so every one would fall in one range; a group hashed by namespace carries only namespaced kinds", k.kindKey, m.GetName())
				}
			}
			return nil
		})
		if why != "" {
			return why
		}
	}
	return ""
}

// fieldValue is obj's value of field; a tombstone stands for its object.
func fieldValue(obj any, field HashField) (string, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	if field == Namespace {
		return m.GetNamespace(), nil
	}
	return string(m.GetUID()), nil
}
