package handover_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/actorinformer/actorinformer/shard/handover"
)

// Scenario tests as data: each file of testdata/scenarios is a script of
// the simulator's lines (sim_test.go's exec) in blocks; each block ends
// with a line "----" and is followed by what the world looks like then,
// up to a blank line. The file's first line may be "ranges N". Besides
// the simulator's lines, a block may say:
//
//	settle   deliver everything, heal every fault, and check promise 2
//	run MS   let MS of time pass without healing (runFor)
//
// After every block the world must have no error (promise 1 after every
// step, promise 2 at each settle). What is printed: the time, each
// incarnation that was ever started and what it does (the ranges whose
// handlers it can call now, or that it gave up, left, was fenced, stopped
// or is paused), its lease on the API server, and the activations since
// the last block (from, to, from its final position or not, and the ranges). -handover.rewrite writes what the
// runs print into the files, for a change that means to change it.
var rewrite = flag.Bool("handover.rewrite", false, "rewrite testdata/scenarios and testdata/core with what the runs print")

func TestScenarios(t *testing.T) { runDataFiles(t, "scenarios", runScenarioFile) }

// runDataFiles runs run on each file of testdata/dir, as a subtest named
// after the file.
func runDataFiles(t *testing.T, dir string, run func(t *testing.T, file string)) {
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no files in testdata/%s: %v", dir, err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			run(t, file)
		})
	}
}

// writeBack writes what a data file's run printed into the file, with
// -handover.rewrite.
func writeBack(t *testing.T, file string, out *strings.Builder) {
	if !*rewrite {
		return
	}
	if err := os.WriteFile(file, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

type scenarioBlock struct {
	lines []string // commands and comments, as written
	want  []string
}

func parseScenario(t *testing.T, text string) []scenarioBlock {
	var out []scenarioBlock
	var cur scenarioBlock
	inWant := false
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		switch {
		case inWant && strings.TrimSpace(l) == "":
			out, cur, inWant = append(out, cur), scenarioBlock{}, false
		case inWant:
			cur.want = append(cur.want, l)
		case l == "----":
			inWant = true
		default:
			cur.lines = append(cur.lines, l)
		}
	}
	if inWant {
		out = append(out, cur)
	} else if len(strings.TrimSpace(strings.Join(cur.lines, ""))) > 0 {
		t.Fatalf("lines after the last \"----\": %q", cur.lines)
	}
	return out
}

func runScenarioFile(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blocks := parseScenario(t, string(b))
	w := newWorld(t, 16)
	var out strings.Builder
	for i, blk := range blocks {
		w.moves = nil
		for _, l := range blk.lines {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			f := strings.Fields(l)
			switch f[0] {
			case "ranges":
				if i != 0 || len(w.members) > 0 {
					t.Fatalf("%s: \"ranges\" comes before any member starts", file)
				}
				w.ranges, _ = strconv.Atoi(f[1])
			case "settle":
				settle(t, w)
			case "run":
				ms, err := strconv.Atoi(f[1])
				if err != nil {
					t.Fatalf("%s: %q: %v", file, l, err)
				}
				runFor(t, w, ms, nil)
			default:
				w.exec(l)
			}
			if len(w.errs) > 0 {
				t.Fatalf("%s, block %d, after %q:\n%s\nscript: %s", file, i+1, l, strings.Join(w.errs, "\n"), w.script())
			}
		}
		got := describeWorld(w)
		if !*rewrite && !slices.Equal(got, blk.want) {
			t.Errorf("%s, block %d:\ngot:\n%s\nwant:\n%s", file, i+1, strings.Join(got, "\n"), strings.Join(blk.want, "\n"))
		}
		for _, l := range blk.lines {
			out.WriteString(l + "\n")
		}
		out.WriteString("----\n" + strings.Join(got, "\n") + "\n\n")
	}
	writeBack(t, file, &out)
}

// describeWorld is what a scenario block prints.
func describeWorld(w *world) []string {
	out := []string{fmt.Sprintf("at %d ms", w.nowMS)}
	for _, m := range w.members {
		var what string
		switch {
		case m.failed != "":
			what = "gave up: " + m.failed
		case m.left:
			what = "left"
		case m.fenced != "":
			what = "fenced: " + m.fenced
		case !m.running || !m.node.alive:
			what = "stopped"
		case m.node.paused:
			what = "paused"
		default:
			var rs []string
			for r := range w.ranges {
				if slices.Contains(w.callers(r), m.id) {
					rs = append(rs, strconv.Itoa(r))
				}
			}
			what = fmt.Sprintf("calls the handlers of %d: %s", len(rs), strings.Join(rs, " "))
		}
		lease := "no lease"
		if l := w.leases[m.id]; l != nil {
			switch {
			case l.holder == m.id:
				lease = "lease held"
			case l.released:
				lease = "lease released"
			default:
				lease = "lease a tombstone"
			}
		}
		out = append(out, fmt.Sprintf("%s: %s; %s", m.id, what, lease))
	}
	type moveKey struct {
		from, to handover.MemberID
		resumed  bool
	}
	moved := map[moveKey][]string{}
	var keys []moveKey
	for _, mv := range w.moves {
		k := moveKey{mv.from, mv.to, mv.resumed}
		if _, ok := moved[k]; !ok {
			keys = append(keys, k)
		}
		moved[k] = append(moved[k], strconv.Itoa(mv.r))
	}
	slices.SortFunc(keys, func(a, b moveKey) int {
		return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
	})
	for _, k := range keys {
		slices.SortFunc(moved[k], func(a, b string) int {
			x, _ := strconv.Atoi(a)
			y, _ := strconv.Atoi(b)
			return x - y
		})
		from, how := string(k.from), "from its final position"
		if from == "" {
			from = "(none)"
		}
		if !k.resumed {
			how = "not from its final position"
		}
		out = append(out, fmt.Sprintf("moved %s -> %s %s: %s", from, k.to, how, strings.Join(moved[k], " ")))
	}
	return out
}
