package sim

import (
	"fmt"
	"math/rand/v2"

	"github.com/actorinformer/actorinformer/reflector"
)

// keys are the names of the objects a random script changes.
var keys = []string{"a", "b", "c", "d", "e", "f"}

// Random runs a random script of about steps lines chosen from seed, then
// quiesces. The returned simulator's Lines is the script (replayable with
// Run) and Err its violations.
func Random(seed uint64, steps int) *Sim {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := New()
	exec := func(format string, args ...any) bool {
		if err := s.Exec(fmt.Sprintf(format, args...)); err != nil {
			s.failf("generated line %q: %v", s.Lines[len(s.Lines)-1], err)
		}
		return len(s.errs) == 0
	}
	if rng.IntN(3) == 0 {
		exec("watchlist")
	}
	exec("batch %d", 1+rng.IntN(5))
	if rng.IntN(3) == 0 {
		exec("resync %ds", 10*(1+rng.IntN(6)))
	}
	// Which handlers are Coalesced comes from a stream of its own, so
	// that the rest of a seed's script does not depend on it.
	crng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	s.coalesce = crng.IntN(2) == 0
	coalesced := func() string {
		if s.coalesce && crng.IntN(2) == 0 {
			return " coalesced"
		}
		return ""
	}
	// So does whether the cache mutation detector runs (no core may
	// change an object it was given).
	if rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d)).IntN(8) == 0 {
		exec("detector")
	}
	nh := 1 + rng.IntN(3)
	for i := 1; i <= nh; i++ {
		if rng.IntN(3) == 0 {
			exec("handler h%d %ds%s", i, 10*(1+rng.IntN(6)), coalesced())
		} else {
			exec("handler h%d%s", i, coalesced())
		}
	}
	for n := rng.IntN(4); n > 0; n-- {
		exec("create %s", keys[rng.IntN(len(keys))])
	}
	exec("start")
	faulty := rng.IntN(4) != 0
	if rng.IntN(16) == 0 {
		// h1 is slow: it falls far behind through bursts, and the
		// indexer keeps its notifications back (DrainMarker).
		s.slow = "h1"
	}
	for i := 0; i < steps && len(s.errs) == 0; i++ {
		exec("%s", s.pick(rng, faulty))
	}
	if len(s.errs) == 0 {
		exec("quiesce")
	}
	return s
}

type choice struct {
	w    int
	line func() string
}

// pick chooses the next line: a delivery, an answer, a flush, a change at
// the source, time, or (when faulty) a fault.
func (s *Sim) pick(rng *rand.Rand, faulty bool) string {
	var cs []choice
	add := func(w int, f func() string) { cs = append(cs, choice{w, f}) }
	for _, a := range s.addrs() {
		if len(s.boxes[a]) > 0 {
			name := s.stageName(a)
			w := 10
			if name == s.slow || name == s.slow+".runner" {
				w = 1
			}
			add(w, func() string { return "deliver " + name })
		}
	}
	if c := s.srv.call; c != nil {
		add(8, func() string {
			if faulty && rng.IntN(5) == 0 {
				codes := []int{500, 410, 403, 429}
				if _, ok := c.(*reflector.ListRequest); ok {
					codes = codes[:3]
				}
				return fmt.Sprintf("answer %d", codes[rng.IntN(len(codes))])
			}
			if _, ok := c.(*reflector.ListRequest); ok && rng.IntN(4) == 0 {
				return fmt.Sprintf("answer old %d", 1+rng.IntN(5))
			}
			return "answer"
		})
	}
	if st := s.srv.stream; st != nil && (len(st.events) > 0 || st.closed) {
		add(8, func() string {
			if len(st.events) > 1 && rng.IntN(2) == 0 {
				return fmt.Sprintf("flush %d", 1+rng.IntN(len(st.events)))
			}
			return "flush"
		})
	}
	add(6, func() string {
		k := keys[rng.IntN(len(keys))]
		if _, ok := s.srv.objs[k]; !ok {
			return "create " + k
		}
		if rng.IntN(3) == 0 {
			return "delete " + k
		}
		return "update " + k
	})
	add(1, func() string { return "bookmark" })
	if s.slow != "" {
		add(2, func() string { return fmt.Sprintf("burst %d", 200+rng.IntN(300)) })
	}
	if st := s.srv.stream; st != nil && !st.closed {
		add(1, func() string { return "repeat" })
	}
	add(1, func() string { return fmt.Sprintf("advance %ds", 1+rng.IntN(5)) })
	if len(s.clk.deadlines) > 0 {
		add(2, func() string { return "tick" })
	}
	if faulty {
		add(2, func() string {
			as := s.addrs()
			return "restart " + s.stageName(as[rng.IntN(len(as))])
		})
		if s.ix.crash.after < 0 {
			// The indexer panics while applying its next batch, after
			// a few objects.
			add(1, func() string { return fmt.Sprintf("crash %d", rng.IntN(4)) })
		}
		if s.srv.stream != nil {
			add(1, func() string { return "cut" })
			add(1, func() string { return "gone" })
			add(1, func() string { return "werr" })
		}
		add(1, func() string { return "compact" })
		add(1, func() string { return "panic " + s.ls[rng.IntN(len(s.ls))].name })
		if len(s.ls) < 5 {
			add(1, func() string {
				c := ""
				if s.coalesce && len(s.ls)%2 == 0 {
					c = " coalesced"
				}
				if rng.IntN(3) == 0 {
					return fmt.Sprintf("add h%d %ds%s", len(s.ls)+1, 10*(1+rng.IntN(6)), c)
				}
				return fmt.Sprintf("add h%d%s", len(s.ls)+1, c)
			})
		}
		add(1, func() string { return "remove " + s.ls[rng.IntN(len(s.ls))].name })
	}
	total := 0
	for _, c := range cs {
		total += c.w
	}
	n := rng.IntN(total)
	for _, c := range cs {
		if n < c.w {
			return c.line()
		}
		n -= c.w
	}
	panic("unreachable")
}
