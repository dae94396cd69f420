package sim

import (
	"slices"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// simClock is a FakeClock that remembers the deadlines of the timers set on
// it, so that the simulator can move time to the next one.
type simClock struct {
	*testingclock.FakeClock
	deadlines []time.Time
}

var _ clock.WithDelayedExecution = (*simClock)(nil)

// epoch is the simulated time at start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newSimClock() *simClock { return &simClock{FakeClock: testingclock.NewFakeClock(epoch)} }

// AfterFunc records the deadline and sets the timer. cb runs inside Step,
// with the clock locked: it must only queue a message.
func (c *simClock) AfterFunc(d time.Duration, cb func()) clock.Timer {
	c.deadlines = append(c.deadlines, c.Now().Add(d))
	return c.FakeClock.AfterFunc(d, cb)
}

// next moves the clock to the earliest recorded deadline after now, firing
// the timers due by then. It reports false when there is none. A deadline
// of a stopped timer only moves time.
func (c *simClock) next() bool {
	now := c.Now()
	c.deadlines = slices.DeleteFunc(c.deadlines, func(t time.Time) bool { return !t.After(now) })
	if len(c.deadlines) == 0 {
		return false
	}
	slices.SortFunc(c.deadlines, time.Time.Compare)
	c.SetTime(c.deadlines[0])
	return true
}
