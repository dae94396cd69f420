// Command compare runs the bench scenarios with actorinformer's informer and
// client-go's, alternating runs in one process, and prints one Markdown
// table per scenario: medians, [min–max] and the ratio ours ÷ client-go.
//
//	go run ./bench/cmd/compare -full -runs 5
//	go run ./bench/cmd/compare -full -runs 5 -only watch
//	go run ./bench/cmd/compare -full -runs 1 -only coalesce -coalesce-events 200000
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/actorinformer/actorinformer/bench"
)

func main() {
	full := flag.Bool("full", false, "use the sizes of issue 5 (default: the small smoke sizes)")
	runs := flag.Int("runs", 5, "runs per implementation and scenario")
	only := flag.String("only", "", "comma-separated scenario kinds to run: sync, watch, slow, control, coalesce, relist, bar (default: all but bar)")
	impl := flag.String("impl", "", "run one implementation only: actors, client-go or actors+coalesced (coalesce only)")
	coalesceKeys := flag.Int("coalesce-keys", 0, "coalesce: pods listed (default: the size's)")
	coalesceEvents := flag.Int("coalesce-events", 0, "coalesce: updates streamed (default: the size's)")
	verbose := flag.Bool("v", false, "print every run's metrics to stderr as it ends")
	cpuprofile := flag.String("cpuprofile", "", "watch and bar: write the CPU profile of each run's measured phase to this directory")
	flag.Parse()

	z := bench.Small
	if *full {
		z = bench.Full
	}
	if *coalesceKeys > 0 {
		z.CoalesceKeys = *coalesceKeys
	}
	if *coalesceEvents > 0 {
		z.CoalesceEvents = *coalesceEvents
	}
	impls := bench.Impls
	if *impl != "" {
		i, err := bench.ParseImpl(*impl)
		if err != nil {
			fatal(err)
		}
		impls = []bench.Impl{i}
	}
	want := map[string]bool{}
	for _, k := range strings.Split(*only, ",") {
		if k = strings.TrimSpace(k); k != "" {
			want[k] = true
		}
	}

	fmt.Printf("# actorinformer vs client-go\n\n")
	fmt.Printf("- machine: %s\n", bench.Machine())
	fmt.Printf("- command: %s\n", strings.Join(os.Args, " "))
	fmt.Printf("- started: %s\n\n", time.Now().UTC().Format(time.RFC3339))
	ks := kinds(z)
	for i := range ks {
		if w, ok := ks[i].sc.(*bench.Watch); ok {
			w.CPUProfile = *cpuprofile
		}
	}
	for i := range ks {
		k := &ks[i]
		if len(want) > 0 && !want[k.name] || len(want) == 0 && k.name == "bar" {
			continue
		}
		start := time.Now()
		var progress func(bench.Impl, int, []bench.Metric)
		if *verbose {
			progress = func(impl bench.Impl, run int, ms []bench.Metric) {
				fmt.Fprintf(os.Stderr, "%s run %d %s:", k.name, run, impl)
				for _, m := range ms {
					fmt.Fprintf(os.Stderr, " %s=%.4g%s", m.Name, m.Value, m.Unit)
				}
				fmt.Fprintln(os.Stderr)
			}
		}
		ki := impls
		if k.impls != nil && *impl == "" {
			ki = k.impls
		}
		t, err := bench.Compare(k.sc, *runs, ki, progress)
		if err != nil {
			fatal(err)
		}
		fmt.Println(t.Markdown())
		fmt.Printf("(%s: %s)\n\n", k.name, time.Since(start).Round(time.Second))
		k.sc = nil // let its pre-built objects go
	}
}

type kind struct {
	name string
	sc   bench.Scenario
	// impls, if set, are the implementations the scenario compares
	// (default: bench.Impls).
	impls []bench.Impl
}

func kinds(z bench.Sizes) []kind {
	return []kind{
		{"sync", &bench.InitialSync{Objects: z.SyncObjects, Handlers: bench.Handlers}, nil},
		{"watch", &bench.Watch{Keys: z.WatchKeys, Events: z.WatchEvents, Handlers: 1}, nil},
		{"watch", &bench.Watch{Keys: z.WatchKeys, Events: z.WatchEvents, Handlers: bench.Handlers}, nil},
		{"slow", &bench.SlowHandler{Keys: z.SlowKeys, Events: z.SlowEvents, Rate: z.SlowRate, Handlers: bench.Handlers, Delay: bench.SlowDelay}, nil},
		{"control", &bench.SlowHandler{Keys: z.SlowKeys, Events: z.SlowEvents, Rate: z.SlowRate, Handlers: bench.Handlers}, nil},
		{"coalesce", &bench.Coalesce{Keys: z.CoalesceKeys, Events: z.CoalesceEvents, Delay: bench.SlowDelay}, bench.CoalesceImpls},
		{"relist", &bench.Relist{Objects: z.RelistObjects, Handlers: bench.Handlers}, nil},
		// The performance bar: 20,000 pods, 200,000 updates, 4 handlers,
		// beside the floor (the same work in one goroutine, handlers
		// inline), whatever the size.
		{"bar", &bench.Watch{Keys: 20_000, Events: 200_000, Handlers: bench.Handlers}, []bench.Impl{bench.Actors, bench.ClientGo, bench.Floor}},
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	os.Exit(1)
}
