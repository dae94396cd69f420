package pulse

import "testing"

// A pulse wakes those that waited before it fired, and only them.
func TestPulseWakesTheWaitersOfItsFire(t *testing.T) {
	var p Pulse
	p.Fire() // nobody waits: nothing to close
	ch := p.Wait()
	select {
	case <-ch:
		t.Fatal("closed before a fire")
	default:
	}
	p.Fire()
	select {
	case <-ch:
	default:
		t.Fatal("not closed by the fire")
	}
	select {
	case <-p.Wait():
		t.Fatal("a new waiter's channel is closed before the next fire")
	default:
	}
}
