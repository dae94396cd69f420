package actors

import (
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/telemetry"
)

// DeltaInfo is what a DeltaSampler sees of one delta, before any span work:
//
//	Type            cache.DeltaType // Added, Updated, Deleted, Replaced (list items) or Sync
//	Key             string          // "namespace/name", or "name" when cluster-scoped
//	Object          any             // as handlers get it: after the transform;
//	                                // a tombstone's is a cache.DeletedFinalStateUnknown
//	ResourceVersion string          // the object's (a tombstone's: the last known one's, or "")
type DeltaInfo = telemetry.DeltaInfo

// DeltaSampler chooses which deltas are traced (WithDeltaSampler). It is
// asked once per delta, before any span work, by the reflector and by the
// delta queue (tombstones, resyncs), possibly from several goroutines at
// once: SampleDelta must be quick and must not block. The deltas it
// chooses go on to the tracer provider, whose sampler has the last word.
type DeltaSampler interface {
	SampleDelta(d DeltaInfo) bool
}

// DeltaSamplerFunc adapts a function to a DeltaSampler.
type DeltaSamplerFunc func(d DeltaInfo) bool

// SampleDelta calls f(d).
func (f DeltaSamplerFunc) SampleDelta(d DeltaInfo) bool { return f(d) }

// WithDeltaSampler makes s choose which deltas are traced. The default (or
// nil) hands every delta to the tracer provider's sampler, which then
// decides alone. A delta s does not choose costs s's decision and nothing
// else: no span, no call to the tracer. The deltas s chooses go on to the
// provider, whose sampler still has the last word: with a parent-based
// always-on sampler they are all traced; with a ratio sampler the two
// ratios multiply. Without a tracer provider s is never asked.
func WithDeltaSampler(s DeltaSampler) SharedOption {
	return sharedOption(func(o *options) { o.deltaSampler = s })
}

// DefaultTraceparentAnnotation is the annotation whose W3C traceparent a
// sampled delta's root span links to, unless WithTraceparentAnnotation says
// otherwise.
const DefaultTraceparentAnnotation = "tracing.k8s.io/traceparent"

// WithTraceparentAnnotation names the object annotation that holds the W3C
// traceparent of the span that wrote the object (default
// DefaultTraceparentAnnotation); "" turns the link off. The root span of a
// sampled delta from the reflector (watch event or list item) links to
// that span context. The value is read only once the delta is known to be
// sampled; a malformed one is ignored, counted
// (actorinformer.traceparent.malformed) and logged at debug level.
func WithTraceparentAnnotation(name string) SharedOption {
	return sharedOption(func(o *options) { o.traceparentAnnotation = &name })
}

func (o *options) traceparent() string {
	if o.traceparentAnnotation == nil {
		return DefaultTraceparentAnnotation
	}
	return *o.traceparentAnnotation
}

// SampleRatio chooses a fraction r of the deltas (r ≤ 0: none, r ≥ 1:
// all), by a hash of the delta's type, key and resource version rather than
// by a random draw: the same delta is chosen or not in every process, and a
// list item, the watch event of the same version and a later resync of it
// are separate draws.
func SampleRatio(r float64) DeltaSampler {
	switch {
	case !(r > 0): // NaN too
		return ratioSampler{}
	case r*(1<<64) >= 1<<64: // r ≥ 1, or so close that the threshold rounds to 2⁶⁴
		return ratioSampler{all: true}
	}
	t := uint64(r * (1 << 64))
	if t == 0 {
		t = 1
	}
	return ratioSampler{threshold: t}
}

type ratioSampler struct {
	threshold uint64 // chosen when the hash is below it
	all       bool
}

func (s ratioSampler) SampleDelta(d DeltaInfo) bool {
	if s.all {
		return true
	}
	return s.threshold != 0 && deltaHash(d) < s.threshold
}

// deltaHash hashes a delta's type, key and resource version: 8 bytes per
// step, then a 64-bit finaliser (MurmurHash3's fmix64). Fixed, so that
// decisions are the same in every process.
func deltaHash(d DeltaInfo) uint64 {
	h := hashString(0x9e3779b97f4a7c15, string(d.Type))
	h = hashString(h, d.Key)
	h = hashString(h, d.ResourceVersion)
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func hashString(h uint64, s string) uint64 {
	const m = 0x9fb21c651e98df25
	h = (h ^ uint64(len(s))) * m
	for ; len(s) >= 8; s = s[8:] {
		w := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		h = (h ^ w) * m
		h ^= h >> 29
	}
	if len(s) > 0 {
		var w uint64
		for i := 0; i < len(s); i++ {
			w |= uint64(s[i]) << (8 * i)
		}
		h = (h ^ w) * m
		h ^= h >> 29
	}
	return h
}

// SampleObjects chooses the deltas whose object satisfies f: f gets the
// object as handlers do (after the transform), except that a tombstone's
// last known object is unwrapped from its cache.DeletedFinalStateUnknown
// (a tombstone without one is not chosen). f is called on the hot path,
// possibly from several goroutines at once.
func SampleObjects(f func(obj any) bool) DeltaSampler {
	return DeltaSamplerFunc(func(d DeltaInfo) bool {
		obj := d.Object
		if ts, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			if obj = ts.Obj; obj == nil {
				return false
			}
		}
		return f(obj)
	})
}

// SampleAny chooses a delta when any of samplers does (nil ones are
// skipped), asking them in order and stopping at the first yes. With no
// sampler it chooses none.
func SampleAny(samplers ...DeltaSampler) DeltaSampler {
	s := make(anySampler, 0, len(samplers))
	for _, x := range samplers {
		if x != nil {
			s = append(s, x)
		}
	}
	return s
}

type anySampler []DeltaSampler

func (s anySampler) SampleDelta(d DeltaInfo) bool {
	for _, x := range s {
		if x.SampleDelta(d) {
			return true
		}
	}
	return false
}

// SampleKeys chooses every delta of the objects with the given keys
// ("namespace/name", or "name" when cluster-scoped). Keys can be added and
// removed while the informer runs; a delta the reflector or the queue makes
// after the change follows it.
func SampleKeys(keys ...string) *KeySampler {
	k := &KeySampler{}
	k.Add(keys...)
	return k
}

// KeySampler is the DeltaSampler of SampleKeys; its zero value is an empty
// set. Its methods may be called by multiple goroutines simultaneously.
// Reading the set on the hot path takes no lock: writers replace an
// immutable set.
type KeySampler struct {
	mu   sync.Mutex                          // serialises writers
	keys atomic.Pointer[map[string]struct{}] // read-only once stored
}

// SampleDelta reports whether d's key is in the set.
func (k *KeySampler) SampleDelta(d DeltaInfo) bool {
	p := k.keys.Load()
	if p == nil {
		return false
	}
	_, ok := (*p)[d.Key]
	return ok
}

// Add adds keys to the set.
func (k *KeySampler) Add(keys ...string) {
	k.update(func(m map[string]struct{}) {
		for _, key := range keys {
			m[key] = struct{}{}
		}
	})
}

// Remove removes keys from the set.
func (k *KeySampler) Remove(keys ...string) {
	k.update(func(m map[string]struct{}) {
		for _, key := range keys {
			delete(m, key)
		}
	})
}

// Keys returns the keys in the set, sorted.
func (k *KeySampler) Keys() []string {
	p := k.keys.Load()
	if p == nil {
		return nil
	}
	out := make([]string, 0, len(*p))
	for key := range *p {
		out = append(out, key)
	}
	slices.Sort(out)
	return out
}

func (k *KeySampler) update(f func(map[string]struct{})) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var m map[string]struct{}
	if p := k.keys.Load(); p != nil {
		m = make(map[string]struct{}, len(*p)+1)
		for key := range *p {
			m[key] = struct{}{}
		}
	} else {
		m = map[string]struct{}{}
	}
	f(m)
	if len(m) == 0 {
		k.keys.Store(nil) // the hot path's quickest answer
		return
	}
	k.keys.Store(&m)
}
