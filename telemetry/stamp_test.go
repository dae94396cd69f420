package telemetry

import (
	"testing"
	"time"
)

func TestStamp(t *testing.T) {
	if !(Stamp{}).IsZero() || (Stamp{}).Age(time.Now()) != 0 {
		t.Fatal("zero Stamp is not zero or has an age")
	}
	now := time.Now()
	for _, age := range []time.Duration{0, time.Microsecond, 1500 * time.Microsecond, time.Hour, 12 * 24 * time.Hour} {
		s := StampAt(now.Add(-age))
		if s.IsZero() {
			t.Fatalf("stamp of now-%v is zero", age)
		}
		// Both ends are truncated to the microsecond.
		if got := s.Age(now); got < age-time.Microsecond || got > age+time.Microsecond {
			t.Errorf("age %v: got %v", age, got)
		}
	}
	// Sub-microsecond parts are dropped, not rounded up into the future.
	if got := StampAt(now).Age(now.Add(999 * time.Nanosecond)); got > time.Microsecond {
		t.Errorf("age under a microsecond: %v", got)
	}
	// Ages past 2^40 µs wrap around.
	wrap := time.Duration(1<<40) * time.Microsecond
	if got := StampAt(now.Add(-wrap - time.Second)).Age(now); got < time.Second-time.Microsecond || got > time.Second+time.Microsecond {
		t.Errorf("age past the wrap: %v, want 1s", got)
	}
	// The stamp of the epoch itself is not the zero Stamp.
	if StampAt(stampEpoch).IsZero() {
		t.Error("stamp of the epoch is zero")
	}
}
