package handover_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// A handler call that began before its member's claim lapsed may run on
// after it: the protocol covers calls up to LeaseDuration − RenewDeadline
// (500 ms in the simulator), less the clocks' rate difference. The worst
// case: a member is cut from the API server and from the others and
// dropped by the provider, and the other member, which sees its last
// lease write at once, revokes the lease as soon as it may and takes the
// ranges over: its first call comes 0.74 s after the cut member's claim
// lapsed. Calls of the simulator's length (simCall, 300 ms) stay
// exclusive; calls of 800 ms do not, which the simulator must see.
func TestCallsWithinTheMarginStayExclusive(t *testing.T) {
	for _, tc := range []struct {
		call      int
		exclusive bool
	}{{300, true}, {800, false}} {
		t.Run(fmt.Sprintf("%dms", tc.call), func(t *testing.T) {
			w := newWorld(t, 2)
			for _, l := range []string{"fifo", fmt.Sprintf("call %d", tc.call), "start m1", "start m2"} {
				w.exec(l)
			}
			if !w.quiesce(rand.New(rand.NewPCG(7, 7))) || len(w.errs) > 0 {
				t.Fatalf("no quiescence: %v\n%s", w.errs, w.dump())
			}
			if d := delivered(w, "m1"); d == 0 {
				t.Fatalf("m1 delivers nothing:\n%s", w.dump())
			}
			for _, l := range []string{"expire m1", "apicut m1", "cut m1"} {
				w.exec(l)
			}
			w.pass(5000, 50, nil)
			overlap := strings.Contains(strings.Join(w.errs, "\n"), "can be called by")
			if tc.exclusive && len(w.errs) > 0 {
				t.Fatalf("calls of %d ms: %s\nscript: %s", tc.call, strings.Join(w.errs, "\n"), w.script())
			}
			if !tc.exclusive && !overlap {
				t.Fatalf("calls of %d ms: no overlap seen; the simulator does not count calls in flight (errors: %v)", tc.call, w.errs)
			}
			if tc.exclusive && delivered(w, "m2") != 2 {
				t.Fatalf("m2 did not take the ranges over:\n%s", w.dump())
			}
		})
	}
}
