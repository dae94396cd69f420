package handover_test

import (
	"strings"
	"testing"
)

func TestDebugStats(t *testing.T) {
	var moves, fenced, members, handoffs, lines int
	var simMS int64
	cmds := map[string]int{}
	reasons := map[string]int{}
	for seed := 1; seed <= 50; seed++ {
		w := runSeed(t, seed, 1500)
		if len(w.errs) > 0 {
			t.Logf("seed %d: %s", seed, w.errs[0][:min(300, len(w.errs[0]))])
		}
		simMS += w.nowMS
		moves += len(w.moves)
		for _, mv := range w.moves {
			if mv.handoff {
				handoffs++
			}
		}
		members += len(w.members)
		for _, m := range w.members {
			if m.fenced != "" {
				fenced++
				reasons[m.fenced[:min(40,len(m.fenced))]]++
			}
		}
		lines += len(w.lines)
		for _, l := range w.lines {
			cmds[strings.Fields(l)[0]]++
		}
	}
	t.Logf("sim time %ds moves %d handoffs %d members %d fenced %d %v lines %d cmds %v", simMS/1000, moves, handoffs, members, fenced, reasons, lines, cmds)
}
