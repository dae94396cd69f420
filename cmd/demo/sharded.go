package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/shard"
)

// runSharded is run with --members 2 or more: the members of a sharded
// group instead of one informer, each with the demo's handlers and
// controller; the per-interval line is followed by one of the members,
// and the totals by each member's and the handovers.
func runSharded(ctx context.Context, cfg config, out io.Writer, logger *slog.Logger, tel *otelSetup, prom *promMetrics, ln net.Listener,
	client kubernetes.Interface, sim *simCluster, load *workload, loadFaults chan func(*workload)) (err error) {
	release := make(chan struct{})
	var stamps *stampMap
	if ln != nil {
		stamps = newStampMap()
	}
	// The members stop when the demo stops them, after the workload.
	fl := newFleet(context.WithoutCancel(ctx), cfg, client, sim, tel, logger, stamps, release)
	faults := newInjector(nil, fl, sim, loadFaults, release)
	defer faults.close() // no handler call waits for a fault any more
	fmt.Fprintf(out, "group:   %d members of sharded informer group %q (package shard), %d ranges of %s; one protoactor cluster on loopback, in-memory provider (a killed member is dropped after --member-ttl %s)\n",
		cfg.members, shardGroup, cfg.ranges, shard.UID, fmtDuration(cfg.memberTTL))
	start := time.Now()
	if err := fl.addMany(cfg.members); err != nil {
		fl.stop()
		return fmt.Errorf("starting the members: %w", err)
	}
	var wg sync.WaitGroup
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	wg.Go(func() { fl.watchOwners(watchCtx) })
	defer func() {
		stopWatch()
		wg.Wait()
	}()
	web, err := startWeb(cfg, out, ln, prom, tel, newSnapshotter(fl, fl, sim, nil, start), faults, stamps)
	if err != nil {
		fl.stop()
		return err
	}
	defer func() { err = errors.Join(err, web.close()) }()
	sum := newSummary(out, fl, fl.live()[0].handlers, start)
	sum.fleet = fl
	fl.waitForSyncAndSay(ctx, out, start)

	end := drive(ctx, cfg, logger, load, faults, sum.line)
	atEnd := fl.atEnd()
	fl.stop()
	shutdown := time.Since(end)
	sum.final(end, shutdown)
	fl.writeTotals(out, start, atEnd)
	writeWorkload(out, cfg, load)
	printTrace(out, tel)
	return nil
}

// waitForSyncAndSay waits until the members have synced and share the
// ranges, and says how they share them and where they filter.
func (f *fleet) waitForSyncAndSay(ctx context.Context, out io.Writer, start time.Time) {
	if !f.waitForSync(ctx) {
		fmt.Fprintln(out, "stopped before the members synced")
		return
	}
	live := f.live()
	var parts []string
	total := 0
	for _, m := range live {
		n := len(m.inf.GetIndexer().ListKeys())
		total += n
		parts = append(parts, fmt.Sprintf("%s %d ranges, %d pods", m.name, len(m.inf.Ranges()), n))
	}
	names := make([]string, len(live[0].handlers))
	for i, h := range live[0].handlers {
		names[i] = h.label
	}
	fmt.Fprintf(out, "synced %d pods in %s over %d members (%s); %d handlers on each: %s\n",
		total, fmtDuration(time.Since(start)), len(live), strings.Join(parts, "; "), len(names), strings.Join(names, ", "))
	mode := f.mode()
	fmt.Fprintf(out, "filter:  %s, %s\n", mode, f.modeNote(mode))
}

// writeLine prints the members' line under the summary's: each member's
// ranges and cache, the caches summed against the cluster's pods, e.g.
//
//	members m1 5 ranges 334 | m2 killed, not yet dropped | m3 11 ranges 666 | cached 1000 (1000 keys), cluster 1000 | filter client
func (f *fleet) writeLine(w io.Writer, now time.Time) {
	var b strings.Builder
	b.WriteString("         members")
	cached := 0
	keys := map[string]struct{}{}
	shown := 0
	for _, m := range f.all() {
		st, dropped := m.getState()
		if dropped && st != memberLive {
			continue
		}
		if shown++; shown > 1 {
			b.WriteString(" |")
		}
		fmt.Fprintf(&b, " %s", m.name)
		switch st {
		case memberKilled:
			b.WriteString(" killed, not yet dropped")
			continue
		case memberLeaving:
			b.WriteString(" leaving,")
		case memberLeft:
			b.WriteString(" left")
			continue
		}
		ks := m.inf.GetIndexer().ListKeys()
		cached += len(ks)
		for _, k := range ks {
			keys[k] = struct{}{}
		}
		fmt.Fprintf(&b, " %d ranges %d", len(m.inf.Ranges()), len(ks))
		if left := m.part.left(now); left > 0 {
			fmt.Fprintf(&b, " (partitioned %s more)", left.Round(time.Second))
		}
	}
	fmt.Fprintf(&b, " | cached %d (%d keys)", cached, len(keys))
	if f.sim != nil {
		fmt.Fprintf(&b, ", cluster %d", f.sim.count())
	}
	unserved := 0
	for _, o := range f.delivering() {
		if len(o) == 0 {
			unserved++
		}
	}
	if unserved > 0 {
		fmt.Fprintf(&b, " | %d ranges unserved", unserved)
	}
	fmt.Fprintf(&b, " | filter %s", f.mode())
	fmt.Fprintln(w, b.String())
}

// memberEnd is a member's state and ranges when the demo ended.
type memberEnd struct {
	state  memberState
	ranges int
}

// atEnd returns each member's state and ranges now.
func (f *fleet) atEnd() map[string]memberEnd {
	out := map[string]memberEnd{}
	for _, m := range f.all() {
		st, _ := m.getState()
		e := memberEnd{state: st}
		if !m.hasStopped() {
			e.ranges = len(m.inf.Ranges())
		}
		out[m.name] = e
	}
	return out
}

// writeTotals prints, once the members have stopped, each member's totals
// (its state and ranges when the demo ended, from atEnd) and the
// handovers.
func (f *fleet) writeTotals(w io.Writer, start time.Time, atEnd map[string]memberEnd) {
	members := f.all()
	var filtered int64
	for _, m := range members {
		filtered += m.status().Filtered
	}
	fmt.Fprintf(w, "members of group %s (%d ranges, filter %s, %d objects received outside their ranges and dropped):\n",
		shardGroup, f.cfg.ranges, f.finalMode(members), filtered)
	fmt.Fprintf(w, "  %-6s %-7s %8s %7s %9s %9s %10s %10s %9s\n", "member", "state", "up", "ranges", "acquired", "released", "handled", "reconciles", "released")
	fmt.Fprintf(w, "  %-6s %-7s %8s %7s %9s %9s %10s %10s %9s\n", "", "at end", "", "at end", "ranges", "ranges", "events", "", "keys")
	for _, m := range members {
		st, _ := m.getState()
		status := m.status()
		var acq, rel int
		for _, h := range status.Handovers {
			if h.Kind == "acquire" {
				acq++
			} else {
				rel++
			}
		}
		var handled int64
		if hs := m.inf.Stats().Handlers; len(hs) > 0 {
			handled = hs[0].Delivered
		}
		var rec, relKeys int64
		if m.ctl != nil {
			c := m.ctl.stats()
			rec, relKeys = c.reconciles, c.released
		}
		e, ok := atEnd[m.name]
		if !ok {
			e.state = st
		}
		m.mu.Lock()
		up := m.ended.Sub(m.started)
		m.mu.Unlock()
		fmt.Fprintf(w, "  %-6s %-7s %8s %7d %9d %9d %10d %10d %9d\n", m.name, e.state, fmtDuration(up.Round(100*time.Millisecond)),
			e.ranges, acq, rel, handled, rec, relKeys)
	}
	tl := f.timeline(start)
	fmt.Fprintf(w, "handovers (%d; each member remembers its last 64):\n", len(tl))
	if len(tl) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for i := len(tl) - 1; i >= 0; i-- {
		h := tl[i]
		from := h.From
		if from == "" {
			from = "-"
		}
		fmt.Fprintf(w, "  %+8.1fs range %2d/%d %4s -> %-4s %-8s listed and delivered in %s", h.AtS, h.Range, f.cfg.ranges, from, h.To, h.Kind,
			fmtDuration(time.Duration(h.TookMs*float64(time.Millisecond))))
		if h.ReleaseMs != nil {
			fmt.Fprintf(w, ", released by %s in %s", h.From, fmtDuration(time.Duration(*h.ReleaseMs*float64(time.Millisecond))))
		}
		if h.GapMs != nil {
			fmt.Fprintf(w, ", unserved for %s", fmtDuration(time.Duration(*h.GapMs*float64(time.Millisecond))))
		}
		fmt.Fprintln(w)
	}
}

// finalMode is the members' filter mode from their last status.
func (f *fleet) finalMode(members []*member) string {
	mode := ""
	for _, m := range members {
		s := m.status().Mode.String()
		switch {
		case s == "pending":
		case mode == "":
			mode = s
		case mode != s:
			return "mixed"
		}
	}
	if mode == "" {
		return "pending"
	}
	return mode
}
