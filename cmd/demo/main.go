package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/actorinformer/actorinformer/shard"
)

const usageHeader = `Usage: demo [flags]

Runs actorinformer's informer on pods and prints, every second, the events per
second through each stage (reflector, queue, indexer, every handler), the
cache size, handler backlogs and panics, and the controller's queue depth and
reconciles; at exit the totals per handler and the trace of one delta from
the watch to every handler, then on to the controller's reconcile of it.

The first handler is a controller's: it adds the pod's key to a traced
workqueue, whose workers reconcile it under a workqueue.process span linked
to the delta's handler span (--workers 0: the handler traces its work itself).

The web page (--http, default http://127.0.0.1:8080/) shows the same live:
the actor graph with each stage's rate and backlog, each handler's latencies,
the informer's state, the last traces as waterfalls (kept in memory, no
collector needed), a key search that traces every delta of the key it names,
and, with the simulated cluster, faults to inject: a slow, panicking or
stopped handler, a cut watch, a 410 Gone, a burst of creates. With --metrics,
/metrics on the same server serves the pipeline's metrics in the Prometheus
text format.

Cluster: --kubeconfig, else $KUBECONFIG, else the in-cluster config when
running in a pod, else (the default) a simulated cluster: client-go's fake
clientset with a workload generator creating, updating and deleting pods.

Sharded (--members N, 2 to 8): N members of one sharded informer group
(package shard) in this process, each a protoactor cluster member on loopback
found through the in-memory provider, each with the handlers and the
controller on the ranges it owns. Under the line per interval, one of the
members: each one's ranges and cache, their sum against the cluster's pods,
and where they filter (on the client with the simulated cluster, whose fake
clientset ignores shard selectors); at exit, the totals per member and the
handovers. The page gets a members panel (the ranges by owner, each member,
the handover timeline) and the faults kill, leave, add member and partition,
also as --fault.

Telemetry, from the standard OpenTelemetry environment:
  OTEL_TRACES_EXPORTER      unset: traces kept in memory (1% of deltas
                            sampled), one complete delta printed at exit;
                            otlp (to OTEL_EXPORTER_OTLP_ENDPOINT), console
                            (JSON spans on stdout), none
  OTEL_TRACES_SAMPLER(_ARG) e.g. traceidratio + 0.01; with an exporter the
                            default is every delta
  OTEL_BSP_MAX_QUEUE_SIZE   spans waiting for the exporter (default 2048);
                            spans beyond are dropped, e.g. during the first
                            list when every delta is sampled
  OTEL_METRICS_EXPORTER     unset/none: no metrics; otlp, console, prometheus
  OTEL_SERVICE_NAME         default actorinformer-demo

Flags:
`

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Getenv, os.Stderr)
	if err != nil {
		os.Exit(2) // the flag package has printed the problem
	}
	// What client-go and apimachinery report through klog (the stacks of
	// recovered handler panics, client-go's informer with --compare) goes
	// to a logger like the demo's, so --log-level governs it too. klog's
	// logger is process-wide and set once, before anything logs.
	if logger, err := newLogger(os.Stderr, cfg.logLevel); err == nil {
		klog.SetSlogLogger(logger)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second Ctrl-C ends a slow shutdown at once
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		stop()
		os.Exit(1)
	}
}

// parseFlags reads the flags; -h prints the usage and exits.
func parseFlags(args []string, getenv func(string) string, errOut io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprint(errOut, usageHeader)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", "kubeconfig of a real cluster to watch (default $KUBECONFIG; neither: in-cluster config in a pod, else the simulated cluster)")
	simulate := fs.Bool("simulate", false, "use the simulated cluster even if $KUBECONFIG or an in-cluster config is present")
	fs.StringVar(&cfg.namespace, "namespace", "", "watch only this namespace (default: all)")
	fs.Float64Var(&cfg.rate, "rate", 200, "simulated cluster: pod creates+updates+deletes per second; 0 = as fast as the informer takes them.\nAny rate is safe: when the informer falls 5000 watch events behind, the generator waits")
	fs.IntVar(&cfg.pods, "pods", 1000, "simulated cluster: pods created before the informer starts; the workload keeps the population near it")
	fs.IntVar(&cfg.namespaces, "namespaces", 4, "simulated cluster: namespaces the pods are spread over")
	fs.Uint64Var(&cfg.seed, "seed", 1, "simulated cluster: workload random seed")
	fs.DurationVar(&cfg.duration, "duration", 0, "stop after this long (default: until Ctrl-C or SIGTERM)")
	fs.DurationVar(&cfg.interval, "interval", time.Second, "time between summary lines")
	fs.IntVar(&cfg.handlers, "handlers", 3, "event handlers: the controller's (with --workers 0 a context-aware one that starts a child span), then the slow and panicking ones if enabled, then counters")
	fs.IntVar(&cfg.workers, "workers", 1, "controller workers taking pod keys from the traced workqueue; 0 = no controller, the first handler traces its work in place")
	fs.DurationVar(&cfg.slowHandler, "slow-handler", 0, "add a handler that sleeps this long per event (e.g. 2ms), to see its backlog grow (without bound, as in client-go) while the others keep up")
	fs.IntVar(&cfg.panicEvery, "panic-every", 0, "add a handler that panics on every N-th event, to see panics isolated (0 = none)")
	fs.DurationVar(&cfg.resync, "resync", 0, "handlers' resync period (0 = no resyncs)")
	fs.IntVar(&cfg.members, "members", 1, fmt.Sprintf("members of one sharded informer group (package shard) run in this process: 1, the default, runs one informer;\n2 to %d run that many members on a protoactor cluster on loopback (in-memory provider), each with the demo's\nhandlers and controller on its own ranges. The page gets a members panel, and faults kill, leave, add and partition", maxMembers))
	fs.IntVar(&cfg.ranges, "ranges", shard.DefaultRanges, "with --members: the virtual ranges the pods' UID hash space is split into")
	fs.DurationVar(&cfg.memberTTL, "member-ttl", 3*time.Second, "with --members: how long after a kill the provider drops the member, as a real provider does once a\nlease or heartbeat expires (etcd's default TTL is 3s); the others take its ranges over then")
	fs.BoolVar(&cfg.compare, "compare", false, "also run client-go's informer (cache.NewSharedIndexInformer) on the same cluster with the same handlers, and print its rates,\nbacklogs and event ages under ours. Its panicking handler's panics are recovered by the demo's wrapper:\nclient-go itself re-panics (utilruntime.ReallyCrash) and would end the process")
	fs.StringVar(&cfg.http, "http", "127.0.0.1:8080", "address of the demo's web page (the pipeline live, its traces, faults to inject) and of /metrics;\n'' for none. Loopback only unless you name another address (e.g. :8080 for every interface)")
	metrics := fs.Bool("metrics", false, "serve the pipeline's metrics at /metrics on the --http server (Prometheus text format).\nOff by default: recording them costs the pipeline 12-36 % more CPU per event (docs/performance.md)")
	var faults faultFlags
	fs.Var(&faults, "fault", "simulated cluster: inject a fault once the informer has synced, repeatable: KIND[=N][@EVERY], KIND one of\ncut-watch (the watch ends; the reflector watches again), gone (the watch ends with 410 Gone and 5 pods are\ndeleted meanwhile: the reflector relists, handlers get tombstones), burst (N creates at once, default 1000);\nwith --members: kill[=MEMBER] (no goodbye), leave[=MEMBER] (graceful), add, partition[=[MEMBER:]DURATION]\n(its messages dropped, default 10s); without MEMBER the one that has run longest.\n@EVERY repeats it, e.g. --fault cut-watch@10s --fault burst=500@5s --fault kill@20s --fault add@20s")
	fs.StringVar(&cfg.logLevel, "log-level", "warn", "informer log level on stderr: debug (with panic stacks), info, warn, error, off")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.faults = faults
	cfg.noMetrics = !*metrics
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected arguments: %q", fs.Args())
		fmt.Fprintln(errOut, err)
		fs.Usage()
		return cfg, err
	}
	if cfg.workers < 0 {
		err := fmt.Errorf("--workers must not be negative")
		fmt.Fprintln(errOut, err)
		return cfg, err
	}
	if cfg.members < 1 || cfg.members > maxMembers {
		err := fmt.Errorf("--members must be in 1..%d", maxMembers)
		fmt.Fprintln(errOut, err)
		return cfg, err
	}
	if cfg.ranges < 1 || cfg.ranges > shard.MaxRanges {
		err := fmt.Errorf("--ranges must be in 1..%d", shard.MaxRanges)
		fmt.Fprintln(errOut, err)
		return cfg, err
	}
	if cfg.memberTTL < 0 {
		err := fmt.Errorf("--member-ttl must not be negative")
		fmt.Fprintln(errOut, err)
		return cfg, err
	}
	if cfg.members > 1 && cfg.compare {
		err := fmt.Errorf("--compare runs beside one informer, not with --members")
		fmt.Fprintln(errOut, err)
		return cfg, err
	}
	for _, f := range faults {
		if f.memberFault() && cfg.members < 2 {
			err := fmt.Errorf("--fault %s needs --members 2 or more", f.req.Fault)
			fmt.Fprintln(errOut, err)
			return cfg, err
		}
	}
	if cfg.interval <= 0 {
		err := fmt.Errorf("--interval must be positive")
		fmt.Fprintln(errOut, err)
		return cfg, err
	}
	if !*simulate {
		if cfg.kubeconfig == "" {
			cfg.kubeconfig = getenv("KUBECONFIG")
		}
		cfg.inCluster = cfg.kubeconfig == "" && getenv("KUBERNETES_SERVICE_HOST") != ""
	} else {
		cfg.kubeconfig = ""
	}
	return cfg, nil
}
