package telemetry

import "time"

// Stamp is when the pipeline received a delta, small enough to ride in the
// padding of fifo.Delta and indexer.Notification (which stay 48 bytes):
// microseconds on the monotonic clock since the process loaded this
// package, modulo 2^40 (about 12.7 days), little-endian. The zero Stamp
// means "not stamped": deltas are stamped only when metrics are on.
//
// Ages computed from a Stamp are exact to the microsecond for ages below
// 2^40 µs; an older age would wrap around.
type Stamp [5]byte

// stampEpoch is the origin of Stamps; it carries a monotonic clock reading,
// so Stamps do not follow wall-clock steps.
var stampEpoch = time.Now()

const stampMask = 1<<40 - 1

// StampAt returns the Stamp of t, which must carry a monotonic clock
// reading (time.Now's do) for the age to ignore wall-clock steps.
func StampAt(t time.Time) Stamp {
	us := uint64(t.Sub(stampEpoch).Microseconds()) & stampMask
	if us == 0 {
		us = 1 // zero means "not stamped"
	}
	return Stamp{byte(us), byte(us >> 8), byte(us >> 16), byte(us >> 24), byte(us >> 32)}
}

// IsZero reports whether s is unset.
func (s Stamp) IsZero() bool { return s == Stamp{} }

func (s Stamp) micros() uint64 {
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 | uint64(s[4])<<32
}

// Age returns how long before now s was taken: 0 for a zero Stamp.
func (s Stamp) Age(now time.Time) time.Duration {
	if s.IsZero() {
		return 0
	}
	n := uint64(now.Sub(stampEpoch).Microseconds()) & stampMask
	return time.Duration((n-s.micros())&stampMask) * time.Microsecond
}
