package shard

import "testing"

// A pulse wakes those that waited before it fired, and only them.
func TestPulseWakesTheWaitersOfItsFire(t *testing.T) {
	var p pulse
	p.fire() // nobody waits: nothing to close
	ch := p.wait()
	select {
	case <-ch:
		t.Fatal("closed before a fire")
	default:
	}
	p.fire()
	select {
	case <-ch:
	default:
		t.Fatal("not closed by the fire")
	}
	select {
	case <-p.wait():
		t.Fatal("a new waiter's channel is closed before the next fire")
	default:
	}
}
