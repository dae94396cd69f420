package bench

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Stats summarises one metric over the runs of one implementation.
type Stats struct {
	Values           []float64
	Median, Min, Max float64
}

func summarize(vs []float64) Stats {
	s := Stats{Values: vs}
	if len(vs) == 0 {
		return s
	}
	sorted := slices.Sorted(slices.Values(vs))
	s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
	if n := len(sorted); n%2 == 1 {
		s.Median = sorted[n/2]
	} else {
		s.Median = (sorted[n/2-1] + sorted[n/2]) / 2
	}
	return s
}

// Row is one metric of a Table.
type Row struct {
	Name, Unit string
	Better     Better
	// By implementation; an implementation that did not run is absent.
	Stats map[Impl]Stats
}

// Ratio is ours ÷ client-go of the medians; ok is false unless both ran and
// client-go's median is not zero.
func (r *Row) Ratio() (ratio float64, ok bool) { return r.RatioTo(ClientGo) }

// RatioTo is ours ÷ other of the medians; ok is false unless both ran and
// other's median is not zero.
func (r *Row) RatioTo(other Impl) (ratio float64, ok bool) {
	a, okA := r.Stats[Actors]
	c, okC := r.Stats[other]
	if !okA || !okC || c.Median == 0 {
		return 0, false
	}
	return a.Median / c.Median, true
}

// Table is the result of Compare: one row per metric.
type Table struct {
	Scenario string
	Runs     int
	Impls    []Impl
	Rows     []Row
}

// Row returns the row of the named metric, or nil.
func (t *Table) Row(name string) *Row {
	for i := range t.Rows {
		if t.Rows[i].Name == name {
			return &t.Rows[i]
		}
	}
	return nil
}

// Compare prepares sc, then runs it runs times per implementation,
// alternating in this process (impls[0], impls[1]; then impls[1],
// impls[0]; …), with a garbage collection before every measured phase. progress, if not nil, is
// told about every run as it ends.
func Compare(sc Scenario, runs int, impls []Impl, progress func(impl Impl, run int, ms []Metric)) (*Table, error) {
	sc.Prepare()
	t := &Table{Scenario: sc.Name(), Runs: runs, Impls: impls}
	values := map[Impl][][]float64{}
	baseline := runtime.NumGoroutine()
	for i := range runs {
		// Every other run starts with the other implementation: the first
		// run of a process grows the heap into fresh pages (page faults),
		// which would otherwise always fall on the same one.
		order := impls
		if i%2 == 1 {
			order = slices.Clone(impls)
			slices.Reverse(order)
		}
		for _, impl := range order {
			quiesce(baseline)
			ms, err := sc.Run(impl)
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", sc.Name(), i+1, err)
			}
			if t.Rows == nil {
				for _, m := range ms {
					t.Rows = append(t.Rows, Row{Name: m.Name, Unit: m.Unit, Better: m.Better, Stats: map[Impl]Stats{}})
				}
			}
			if len(ms) != len(t.Rows) {
				return nil, fmt.Errorf("%s: %s returned %d metrics, want %d", sc.Name(), impl, len(ms), len(t.Rows))
			}
			if values[impl] == nil {
				values[impl] = make([][]float64, len(ms))
			}
			for j, m := range ms {
				values[impl][j] = append(values[impl][j], m.Value)
			}
			if progress != nil {
				progress(impl, i+1, ms)
			}
		}
	}
	for impl, vs := range values {
		for j := range t.Rows {
			t.Rows[j].Stats[impl] = summarize(vs[j])
		}
	}
	return t, nil
}

// quiesce waits (at most 5 s) until no more than baseline goroutines run, so
// that a run does not start while goroutines of the previous one still hold
// its memory: protoactor's dead-letter throttle timer, for one, keeps a
// stopped actor system reachable for up to a second, and with it the
// previous informer's cache, which would then count in the next run's
// baseline heap.
func quiesce(baseline int) {
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// Markdown renders t as a Markdown table: medians with [min–max] over the
// runs, and the ratio ours ÷ client-go of the medians.
func (t *Table) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s** — medians of %d alternated runs each, [min–max]\n\n", t.Scenario, t.Runs)
	b.WriteString("| metric |")
	for _, impl := range t.Impls {
		fmt.Fprintf(&b, " %s |", impl)
	}
	both := len(t.Impls) == 2
	floor := slices.Contains(t.Impls, Actors) && slices.Contains(t.Impls, ClientGo) && slices.Contains(t.Impls, Floor)
	if floor {
		b.WriteString(" ours ÷ client-go | ours ÷ floor | better |")
	}
	if both {
		b.WriteString(" ours ÷ client-go | better |")
	}
	b.WriteString("\n|---|")
	for range t.Impls {
		b.WriteString("---:|")
	}
	if floor {
		b.WriteString("---:|---:|---|")
	}
	if both {
		b.WriteString("---:|---|")
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		fmt.Fprintf(&b, "| %s (%s) |", r.Name, r.Unit)
		for _, impl := range t.Impls {
			s := r.Stats[impl]
			fmt.Fprintf(&b, " %s [%s–%s] |", num(s.Median), num(s.Min), num(s.Max))
		}
		if floor {
			for _, other := range []Impl{ClientGo, Floor} {
				if ratio, ok := r.RatioTo(other); ok && r.Better != Neither {
					fmt.Fprintf(&b, " %.2f× |", ratio)
				} else {
					b.WriteString(" — |")
				}
			}
			fmt.Fprintf(&b, " %s |", r.Better)
		}
		if both {
			ratio, ok := r.Ratio()
			switch {
			case r.Better == Neither:
				b.WriteString(" — | — |")
			case !ok:
				b.WriteString(" n/a |")
				fmt.Fprintf(&b, " %s |", r.Better)
			default:
				fmt.Fprintf(&b, " %.2f× | %s |", ratio, r.Better)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func (b Better) String() string {
	switch b {
	case Lower:
		return "lower"
	case Higher:
		return "higher"
	}
	return "—"
}

// num prints with three significant digits, without exponents.
func num(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// Machine describes where the figures were taken: cores, CPU model, Go
// version, GOMAXPROCS.
func Machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), GOMAXPROCS=%d, %s %s/%s",
		runtime.NumCPU(), model, runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
