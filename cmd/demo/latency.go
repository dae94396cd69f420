package main

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// latencyBuckets is the number of buckets of a latencyHist: below 8 ns,
// then four per octave up to 2^43 ns (about 2.4 hours), and the last one
// for anything longer.
const latencyBuckets = 1 + 40*4 + 1

// latencyHist counts durations in buckets a quarter of an octave wide, so
// that a quantile read from it is at most 25 % above the true value. Its
// methods may be called by multiple goroutines simultaneously; observing
// costs one atomic add.
type latencyHist struct {
	n [latencyBuckets]atomic.Int64
}

// latencyBucket is the bucket of d: 0 for d < 8 ns; i ≥ 1 covers
// [lower(i), upper(i)) with upper(i) = (5+s)·2^(o-2), o = 3+(i-1)/4,
// s = (i-1)%4.
func latencyBucket(d time.Duration) int {
	if d < 8 {
		return 0
	}
	ns := uint64(d)
	o := bits.Len64(ns) - 1 // ns is in [2^o, 2^(o+1))
	s := int(ns>>(o-2)) & 3 // which quarter of the octave
	return min(1+(o-3)*4+s, latencyBuckets-1)
}

// latencyUpper is the exclusive upper bound of bucket i (for the last one,
// its lower bound).
func latencyUpper(i int) time.Duration {
	if i == 0 {
		return 8
	}
	i = min(i, latencyBuckets-2)
	o, s := 3+(i-1)/4, (i-1)%4
	return time.Duration(uint64(5+s) << (o - 2))
}

func (h *latencyHist) observe(d time.Duration) { h.n[latencyBucket(d)].Add(1) }

// counts copies the buckets.
func (h *latencyHist) counts() []int64 {
	c := make([]int64, latencyBuckets)
	for i := range h.n {
		c[i] = h.n[i].Load()
	}
	return c
}

// latencyQuantile is the q-quantile (0 < q ≤ 1) of the observations
// counted by cur and not by prev (prev nil: all of cur), as the upper bound
// of its bucket; 0 and false when there are none.
func latencyQuantile(cur, prev []int64, q float64) (time.Duration, bool) {
	var total int64
	for i := range cur {
		total += cur[i] - at(prev, i)
	}
	if total <= 0 {
		return 0, false
	}
	rank := int64(q*float64(total) + 0.5)
	rank = min(max(rank, 1), total)
	var seen int64
	for i := range cur {
		seen += cur[i] - at(prev, i)
		if seen >= rank {
			return latencyUpper(i), true
		}
	}
	return latencyUpper(len(cur) - 1), true
}

func at(s []int64, i int) int64 {
	if i < len(s) {
		return s[i]
	}
	return 0
}
