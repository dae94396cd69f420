package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/actorinformer/actorinformer/actors"
)

// config is what the flags set.
type config struct {
	// Cluster: a kubeconfig file, the in-cluster config, or (neither) the
	// simulated cluster.
	kubeconfig string
	inCluster  bool
	namespace  string

	// Simulated cluster.
	rate       float64
	pods       int
	namespaces int
	seed       uint64

	duration    time.Duration
	interval    time.Duration
	resync      time.Duration
	handlers    int
	workers     int // controller workers; 0: no controller
	slowHandler time.Duration
	panicEvery  int
	logLevel    string

	// members is the number of members of the sharded group (members.go);
	// 1: the one informer. ranges is the group's range count, memberTTL
	// how long after a kill the provider drops a member.
	members   int
	ranges    int
	memberTTL time.Duration

	// compare runs client-go's informer beside ours (compare.go).
	compare bool
	// http is the demo's web server address, "" for none; /metrics is
	// served there (metrics.go).
	http string
	// noMetrics leaves /metrics out of the web server (--metrics=false).
	noMetrics bool
	// faults are the --fault faults, applied to the simulated cluster.
	faults []scheduledFault
	// serving, when not nil, is told the page's URL once the web server
	// listens (for tests).
	serving func(url string)
}

// run runs the demo until ctx is done or cfg.duration has passed: an
// informer on pods with the demo's handlers, a summary line per interval on
// out, totals and one traced delta at the end. Logs go to errOut.
func run(ctx context.Context, cfg config, out, errOut io.Writer) (err error) {
	if cfg.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.duration)
		defer cancel()
	}
	logger, err := newLogger(errOut, cfg.logLevel)
	if err != nil {
		return err
	}
	prom, readers, err := metricsReaders(cfg)
	if err != nil {
		return err
	}
	var ln net.Listener
	if cfg.http != "" {
		if ln, err = listen(cfg.http); err != nil {
			return err
		}
		defer ln.Close() // if we return before the server takes it
	}
	tel, err := setupTelemetry(context.WithoutCancel(ctx), handlerCount(cfg), cfg.workers > 0, ln != nil, readers...)
	if err != nil {
		return err
	}
	defer func() {
		// Flush what the exporters still hold, even after Ctrl-C.
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err = errors.Join(err, tel.shutdown(flushCtx))
	}()

	client, sim, source, err := openCluster(cfg)
	if err != nil {
		return err
	}
	var load *workload
	var loadFaults chan func(*workload)
	if sim != nil {
		defer sim.Close()
		load = newWorkload(sim, cfg.seed, cfg.namespaces, cfg.pods)
		loadFaults = make(chan func(*workload))
		load.faults = loadFaults
		if err := load.populate(); err != nil {
			return fmt.Errorf("simulated cluster: %w", err)
		}
		load.counts = [3]int64{} // count the workload only
	}
	fmt.Fprintf(out, "cluster: %s\ntraces:  %s\nmetrics: %s\n", source, tel.traces, tel.metrics)
	for _, f := range cfg.faults {
		if f.clusterFault() && sim == nil {
			return fmt.Errorf("--fault %s needs the simulated cluster", f.req.Fault)
		}
	}

	if cfg.members > 1 {
		return runSharded(ctx, cfg, out, logger, tel, prom, ln, client, sim, load, loadFaults)
	}
	factory, inf, ctl, handlers, err := newInformer(client, cfg, tel, logger)
	if err != nil {
		return err
	}
	release := make(chan struct{})
	faults := newInjector(handlers, nil, sim, loadFaults, release)
	defer faults.close() // no handler call waits for a fault any more
	var stamps *stampMap
	if ln != nil {
		stamps = newStampMap()
		for _, h := range handlers {
			h.stamps = stamps
		}
		if err := inf.SetTransform(stampTransform(stamps, len(handlers))); err != nil {
			factory.Shutdown()
			return err
		}
	}
	if ctl != nil {
		ctl.start()
	}
	side, err := startClientGoSide(client, cfg, handlers)
	if err != nil {
		factory.Shutdown()
		return err
	}
	defer side.stop() // if we return early; nil-safe, idempotent
	start := time.Now()
	p := single{SharedIndexInformer: inf, handlers: handlers, ctl: ctl}
	web, err := startWeb(cfg, out, ln, prom, tel, newSnapshotter(p, nil, sim, side, start), faults, stamps)
	if err != nil {
		factory.Shutdown()
		return err
	}
	defer func() { err = errors.Join(err, web.close()) }()
	factory.Start(ctx.Done())
	sum := newSummary(out, p, handlers, start)
	sum.side = side
	waitForSync(ctx, out, factory, inf, handlers, start)
	side.waitForSyncAndSay(ctx, out, start)

	end := drive(ctx, cfg, logger, load, faults, sum.line)
	factory.Shutdown()
	if ctl != nil {
		ctl.stop() // after the informer: no handler adds a key any more
	}
	shutdown := time.Since(end)
	side.stop()
	sum.final(end, shutdown)
	side.writeTotals(out)
	writeWorkload(out, cfg, load)
	printTrace(out, tel)
	return nil
}

// startWeb starts the page's server on ln (nil: none) with snap's
// snapshots, faults (cluster faults only on the simulated cluster; member
// faults with a group) and the metrics of prom, and says where on out.
// The returned server's close is nil-safe.
func startWeb(cfg config, out io.Writer, ln net.Listener, prom *promMetrics, tel *otelSetup, snap *snapshotter, faults *injector, stamps *stampMap) (*webServer, error) {
	if ln == nil {
		return nil, nil
	}
	a := &api{
		snap: snap, ring: tel.ring, keys: tel.keys, now: time.Now,
		viewers: newViewers(stamps), fleet: snap.fleet,
	}
	if faults.sim != nil || faults.fleet != nil {
		a.faults = faults
	}
	if prom != nil {
		a.metrics = metricsHandler(prom.registry)
	}
	web := newWebServer(ln)
	a.done = web.done
	web.start(a.routes())
	web.cleanup = append(web.cleanup, a.viewers.close)
	if tel.keys != nil {
		web.cleanup = append(web.cleanup, tel.keys.close)
	}
	what := "the pipeline live, traces, key search"
	if snap.fleet != nil {
		what = "the members and their ranges live, the pipeline, traces, key search"
	}
	if a.faults != nil {
		what += ", faults"
	}
	if a.metrics != nil {
		what += "; /metrics"
	}
	fmt.Fprintf(out, "web:     %s (%s)\n", web.url(), what)
	if !web.loopback() {
		fmt.Fprintln(out, "         not on loopback only: whoever reaches this address can see the cluster's keys and inject faults")
	}
	if cfg.serving != nil {
		cfg.serving(web.url())
	}
	return web, nil
}

// writeWorkload prints what the simulated cluster's workload did.
func writeWorkload(out io.Writer, cfg config, load *workload) {
	if load != nil {
		fmt.Fprintf(out, "workload after the initial %d pods: %d creates, %d updates, %d deletes\n",
			cfg.pods, load.counts[opCreate], load.counts[opUpdate], load.counts[opDelete])
	}
}

// newInformer creates a factory with the pod informer, passing it the
// telemetry providers and logger, the controller (nil with --workers 0) on
// the informer's cache, and registers the demo's handlers. The caller
// starts and stops the controller.
func newInformer(client kubernetes.Interface, cfg config, tel *otelSetup, logger *slog.Logger) (*actors.Factory, *actors.SharedIndexInformer, *controller, []*demoHandler, error) {
	opts := []actors.FactoryOption{
		actors.WithTracerProvider(tel.tracerProvider),
		actors.WithLogger(logger),
	}
	if tel.meterProvider != nil {
		opts = append(opts, actors.WithMeterProvider(tel.meterProvider))
	}
	if cfg.namespace != "" {
		opts = append(opts, actors.WithNamespace(cfg.namespace))
	}
	if tel.deltaSampler != nil {
		opts = append(opts, actors.WithDeltaSampler(tel.deltaSampler))
	}
	factory := actors.NewFactory(client, cfg.resync, opts...)
	inf := actors.Pods(factory).Informer()
	var ctl *controller
	if cfg.workers > 0 {
		ctl = newController(queueName, inf.GetIndexer(), cfg.workers, tel.tracerProvider, tel.meterProvider)
	}
	handlers := newHandlers(handlerCount(cfg), cfg.slowHandler, cfg.panicEvery, tel.tracerProvider, ctl)
	for _, h := range handlers {
		if err := h.register(inf); err != nil {
			factory.Shutdown()
			return nil, nil, nil, nil, err
		}
	}
	return factory, inf, ctl, handlers, nil
}

// waitForSync waits for the first list to reach the handlers and says so.
func waitForSync(ctx context.Context, out io.Writer, f *actors.Factory, inf *actors.SharedIndexInformer, hs []*demoHandler, start time.Time) {
	for _, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			fmt.Fprintln(out, "stopped before the informer synced")
			return
		}
	}
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.label
	}
	fmt.Fprintf(out, "synced %d pods in %s; %d handlers: %s\n",
		len(inf.GetStore().ListKeys()), fmtDuration(time.Since(start)), len(hs), strings.Join(names, ", "))
}

// handlerCount is how many handlers the demo registers: --handlers, but at
// least the first (controller or tracing) one plus the slow and panicking ones asked for.
func handlerCount(cfg config) int {
	n := 1
	if cfg.slowHandler > 0 {
		n++
	}
	if cfg.panicEvery > 0 {
		n++
	}
	return max(n, cfg.handlers)
}

// printEvery calls f every interval until ctx is done.
// drive runs the workload (if any) and the --fault schedule, calls line
// every interval until ctx ends, then stops both and returns when it
// ended.
func drive(ctx context.Context, cfg config, logger *slog.Logger, load *workload, faults *injector, line func(time.Time)) (end time.Time) {
	var wg sync.WaitGroup
	loadCtx, stopLoad := context.WithCancel(ctx)
	if load != nil {
		wg.Go(func() {
			if err := load.run(loadCtx, cfg.rate); err != nil {
				logger.Error("workload stopped", "err", err)
			}
		})
	}
	wg.Go(func() {
		faults.runScheduled(loadCtx, cfg.faults, func(format string, args ...any) {
			logger.Warn(fmt.Sprintf(format, args...))
		})
	})
	printEvery(ctx, cfg.interval, line)

	end = time.Now()
	stopLoad()
	faults.close()
	wg.Wait()
	return end
}

func printEvery(ctx context.Context, interval time.Duration, f func(time.Time)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f(now)
		}
	}
}

// printTrace prints the delta the span keeper kept, if tracing is on.
func printTrace(out io.Writer, tel *otelSetup) {
	if tel.keeper == nil {
		return
	}
	delta, process := tel.keeper.Kept()
	if len(delta) == 0 {
		fmt.Fprintln(out, "\nno complete traced delta was recorded (too few events sampled?)")
		return
	}
	if len(process) == 0 {
		fmt.Fprintf(out, "\none traced delta, from the watch to every handler (trace %s):\n", delta[0].SpanContext().TraceID())
	} else {
		fmt.Fprintf(out, "\none traced delta, from the watch to every handler (trace %s),\nthen the controller's processing of its key (trace %s, linked from the controller's handler span):\n",
			delta[0].SpanContext().TraceID(), process[0].SpanContext().TraceID())
	}
	writeSpanTree(out, delta, process)
}

// openCluster returns the client to watch: a real cluster's from a
// kubeconfig or the in-cluster config, or a simulated cluster's.
func openCluster(cfg config) (kubernetes.Interface, *simCluster, string, error) {
	var rc *rest.Config
	var err error
	var source string
	switch {
	case cfg.kubeconfig != "":
		// KUBECONFIG may list several files, merged as kubectl does.
		rules := &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(cfg.kubeconfig)}
		if len(rules.Precedence) == 1 {
			rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.kubeconfig}
		}
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		source = "kubeconfig " + cfg.kubeconfig
	case cfg.inCluster:
		rc, err = rest.InClusterConfig()
		source = "in-cluster config"
	default:
		sim := newSimCluster()
		rate := fmt.Sprintf("%g events/s", cfg.rate)
		if cfg.rate <= 0 {
			rate = "as many events/s as the informer takes"
		}
		return sim.Client(), sim, fmt.Sprintf("simulated: %d pods in %d namespaces, %s (--kubeconfig for a real cluster)",
			cfg.pods, max(cfg.namespaces, 1), rate), nil
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("%s: %w", source, err)
	}
	// Protobuf decodes faster than JSON; the informer is then the bottleneck.
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	// The sharded members' range informers list and watch through this
	// client: at a start, a list and a watch per range. client-go's
	// default limits (5 requests a second, bursts of 10) would hold a
	// start up by seconds; a controller's are these.
	rc.QPS, rc.Burst = 50, 100
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, "", err
	}
	// Their leases and the range records go through a client of their own,
	// with its own rate limiter: no burst of lists can hold up a renewal.
	leases, err := kubernetes.NewForConfig(rest.CopyConfig(rc))
	if err != nil {
		return nil, nil, "", err
	}
	return leasesApart{Interface: client, leases: leases}, nil, source + " (" + rc.Host + ")", nil
}

// leasesApart is a clientset whose coordination client, which the shard
// members' leases and range records use, has a rate limiter of its own.
type leasesApart struct {
	kubernetes.Interface
	leases kubernetes.Interface
}

func (c leasesApart) CoordinationV1() coordinationv1.CoordinationV1Interface {
	return c.leases.CoordinationV1()
}
