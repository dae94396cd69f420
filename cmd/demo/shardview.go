package main

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
)

// What the page and the terminal show of the group: which member delivers
// which range, the handovers, and the members' caches against the
// cluster's objects.

// ownerPoll is how often the fleet looks at which member delivers which
// range.
const ownerPoll = 100 * time.Millisecond

// stintsKept is how many past deliverers of a range the owner log keeps.
const stintsKept = 8

// ownerLog follows which members deliver each range, so that a takeover
// can name the member the range was taken from: a member that was lost
// says nothing, and its successor's handover record names no one. Its
// methods may be called by multiple goroutines simultaneously.
type ownerLog struct {
	mu  sync.Mutex
	cur [][]string // per range, the members delivering it at the last look
	// past: per range, members that stopped delivering it, oldest first.
	past [][]stint
}

// stint is a member's delivering of a range that ended at until.
type stint struct {
	member string
	until  time.Time
}

func newOwnerLog(ranges int) *ownerLog {
	return &ownerLog{cur: make([][]string, ranges), past: make([][]stint, ranges)}
}

// observe records who delivers each range at now.
func (l *ownerLog) observe(now time.Time, owners [][]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for r := range l.cur {
		var next []string
		if r < len(owners) {
			next = owners[r]
		}
		for _, m := range l.cur[r] {
			if !slices.Contains(next, m) {
				l.past[r] = append(l.past[r], stint{member: m, until: now})
				if len(l.past[r]) > stintsKept {
					l.past[r] = l.past[r][1:]
				}
			}
		}
		l.cur[r] = slices.Clone(next)
	}
}

// before returns the last member other than not that stopped delivering
// range r by at (allowing for the poll's delay), and when.
func (l *ownerLog) before(r int, at time.Time, not string) (stint, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r < 0 || r >= len(l.past) {
		return stint{}, false
	}
	for i := len(l.past[r]) - 1; i >= 0; i-- {
		s := l.past[r][i]
		if s.member != not && !s.until.After(at.Add(2*ownerPoll)) {
			return s, true
		}
	}
	return stint{}, false
}

// watchOwners records, every ownerPoll until ctx is done, who delivers
// each range.
func (f *fleet) watchOwners(ctx context.Context) {
	t := time.NewTicker(ownerPoll)
	defer t.Stop()
	for {
		f.owners.observe(time.Now(), f.delivering())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// delivering returns, per range, the names of the members that deliver it
// now (their handlers get its objects).
func (f *fleet) delivering() [][]string {
	out := make([][]string, f.cfg.ranges)
	for _, m := range f.all() {
		if m.hasStopped() {
			continue
		}
		for _, r := range m.inf.Ranges() {
			if r.Index < len(out) {
				out[r.Index] = append(out[r.Index], m.name)
			}
		}
	}
	return out
}

// releaseSlack is how long before a new owner's attempt at a range the
// previous owner's release may have ended and still be its release to
// that owner (an earlier attempt, of an older epoch, got it).
const releaseSlack = 5 * time.Second

// handoverJSON is one range moving to a member, as the timeline shows it.
type handoverJSON struct {
	Range int    `json:"range"`
	From  string `json:"from"` // the member it came from, "" for none
	To    string `json:"to"`
	// Kind is "handover" (the previous owner released it), "takeover" (the
	// previous owner was lost: killed, or gone without answering) or
	// "first" (no member delivered it before).
	Kind  string  `json:"kind"`
	Epoch uint64  `json:"epoch"`
	Start string  `json:"start"` // RFC 3339, when the new owner started listing it
	AtS   float64 `json:"at_s"`  // the same, in seconds since the demo started
	// TookMs is from the new owner's first list of the range to its
	// handlers' first call; ReleaseMs, for a handover, the previous owner's
	// release (from the ask to the end of its last handler call on the
	// range); GapMs the time no member delivered the range (for a
	// takeover, from the lost member's last delivery).
	TookMs    float64  `json:"took_ms"`
	ReleaseMs *float64 `json:"release_ms"`
	GapMs     *float64 `json:"gap_ms"`
	at        time.Time
}

// memberHandover is a handover a member (by name) recorded.
type memberHandover struct {
	member string
	h      shard.Handover
}

// releaseOf is how long the release of a range by from took (ms), of
// those in rels: the latest that ended within releaseSlack before the new
// owner's attempt began (start), and began before the new owner delivered
// the range. Its end may come after that: the releaser's bookkeeping after
// its record's write races the new owner's claim and first delivery. It
// may have been released to another member, which passed the handoff on
// when the view moved the range here. nil when there is none.
func releaseOf(rels []memberHandover, from string, start, delivered time.Time) *float64 {
	var out *float64
	for _, r := range rels {
		end := r.h.Start.Add(r.h.Duration)
		if r.member == from && !end.Before(start.Add(-releaseSlack)) && r.h.Start.Before(delivered) {
			rel := ms(r.h.Duration)
			out = &rel
		}
	}
	return out
}

// timeline returns the ranges' moves that the members still remember
// (each keeps its last 64 handovers), latest first.
func (f *fleet) timeline(start time.Time) []handoverJSON {
	var acquires []memberHandover
	releases := map[int][]memberHandover{}
	for _, m := range f.all() {
		for _, h := range m.status().Handovers {
			if h.Kind == "acquire" {
				acquires = append(acquires, memberHandover{m.name, h})
			} else {
				releases[h.Range.Index] = append(releases[h.Range.Index], memberHandover{m.name, h})
			}
		}
	}
	out := make([]handoverJSON, 0, len(acquires))
	for _, a := range acquires {
		h := a.h
		delivered := h.Start.Add(h.Duration)
		j := handoverJSON{
			Range: h.Range.Index, From: f.nameOf(h.From), To: a.member, Epoch: h.Epoch,
			Start: h.Start.UTC().Format(time.RFC3339Nano), AtS: h.Start.Sub(start).Seconds(),
			TookMs: ms(h.Duration), at: h.Start,
		}
		// The owner log knows who delivered the range last, and until
		// when: the member the new owner names (the holder its claim
		// replaced, or the releaser of the record), or, when it names
		// none, whoever it was.
		prev, ok := f.owners.before(h.Range.Index, delivered, a.member)
		if ok && j.From == "" {
			j.From = prev.member
		} else if ok && prev.member != j.From {
			prev = stint{}
		}
		if j.From != "" {
			j.ReleaseMs = releaseOf(releases[h.Range.Index], j.From, h.Start, delivered)
		}
		switch {
		case j.From == "":
			j.Kind = "first"
		case j.ReleaseMs != nil:
			j.Kind = "handover"
		default:
			j.Kind = "handover"
			if pm, err := f.byName(j.From); err == nil {
				if st, _ := pm.getState(); st == memberKilled {
					j.Kind = "takeover"
				}
			}
			if !prev.until.IsZero() {
				gap := ms(max(delivered.Sub(prev.until), 0))
				j.GapMs = &gap
			}
		}
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b handoverJSON) int {
		return cmp.Or(b.at.Compare(a.at), cmp.Compare(a.Range, b.Range))
	})
	return out
}

// memberSample is a member's counters at one time.
type memberSample struct {
	stats      actors.Stats
	reconciles int64
}

// sample returns every kept member's counters.
func (f *fleet) sample() map[string]memberSample {
	out := map[string]memberSample{}
	for _, m := range f.all() {
		smp := memberSample{stats: m.inf.Stats()}
		if m.ctl != nil {
			smp.reconciles = m.ctl.reconciles.Load()
		}
		out[m.name] = smp
	}
	return out
}

// shardSnapshot is the sharded group on the page.
type shardSnapshot struct {
	Group     string `json:"group"`
	Ranges    int    `json:"ranges"`
	HashField string `json:"hash_field"`
	// Mode is where the live members filter (server, client, pending, or
	// mixed); ModeNote says why, in words.
	Mode     string `json:"mode"`
	ModeNote string `json:"mode_note"`
	// MemberTTLMs is how long after a kill the provider drops the member.
	MemberTTLMs float64 `json:"member_ttl_ms"`
	// ClusterObjects is the simulated cluster's pod count (null for a real
	// cluster); Cached the live members' caches summed; Distinct the keys
	// among them, each counted once. Nothing lost, nothing doubled: the
	// three are equal (but for the events still on their way).
	ClusterObjects *int64 `json:"cluster_objects"`
	Cached         int    `json:"cached"`
	Distinct       int    `json:"distinct"`
	// Owners are, per range, the members whose handlers get it now: one
	// each when all is well, none while a range moves or its owner is lost.
	Owners    [][]string       `json:"owners"`
	Members   []memberSnapshot `json:"members"`
	Handovers []handoverJSON   `json:"handovers"` // latest first
	CanAdd    bool             `json:"can_add"`
}

// goneShown is how many of the stopped members a snapshot shows.
const goneShown = 4

// shown returns the members a snapshot shows: those not stopped, and the
// goneShown that stopped last.
func (f *fleet) shown() []*member {
	all := f.all()
	var gone []*member
	for _, m := range all {
		if st, _ := m.getState(); st == memberKilled || st == memberLeft {
			gone = append(gone, m)
		}
	}
	slices.SortStableFunc(gone, func(a, b *member) int { return b.endedAt().Compare(a.endedAt()) })
	if len(gone) > goneShown {
		gone = gone[:goneShown]
	}
	out := all[:0:0]
	for _, m := range all {
		st, _ := m.getState()
		if (st != memberKilled && st != memberLeft) || slices.Contains(gone, m) {
			out = append(out, m)
		}
	}
	return out
}

// maxTimeline bounds the handovers of a snapshot.
const maxTimeline = 60

// memberSnapshot is one member: rates are per second over the snapshot's
// window.
type memberSnapshot struct {
	Name  string `json:"name"`
	ID    string `json:"id"` // the cluster's member id
	State string `json:"state"`
	// Dropped: the provider no longer lists it (a killed member, once the
	// TTL is over; a member that left).
	Dropped bool `json:"dropped"`
	// PartitionedS is how long its partition lasts still, 0 when none;
	// MessagesDropped counts its messages a partition dropped.
	PartitionedS    float64  `json:"partitioned_s"`
	MessagesDropped int64    `json:"messages_dropped"`
	UpS             float64  `json:"up_s"`
	Synced          bool     `json:"synced"`
	Ranges          []int    `json:"ranges"` // delivered now
	View            []string `json:"view"`   // the group's members as it sees them
	CacheSize       int      `json:"cache_size"`
	Mode            string   `json:"mode"`
	Filtered        int64    `json:"filtered"`
	// Stages are the events per second through its range informers'
	// reflectors, delta queues and indexers, summed.
	Stages         map[string]float64 `json:"stages"`
	Handlers       []memberHandler    `json:"handlers"`
	WorkqueueDepth int                `json:"workqueue_depth"`
	ReconcileRate  float64            `json:"reconcile_rate"`
	Reconciles     int64              `json:"reconciles"`
	// ReleasedKeys are keys its controller dropped from its queue because
	// their range had moved away (shard.Informer.Released).
	ReleasedKeys int64  `json:"released_keys"`
	Failed       string `json:"failed"`
}

type memberHandler struct {
	Name      string  `json:"name"`
	Rate      float64 `json:"rate"`
	Backlog   int64   `json:"backlog"`
	Delivered int64   `json:"delivered"`
	Panics    int64   `json:"panics"`
}

// describe is the group's part of a snapshot.
func (f *fleet) describe(prev, cur sample, start time.Time) *shardSnapshot {
	dt := cur.at.Sub(prev.at).Seconds()
	rate := func(c, p int64) float64 {
		if dt <= 0 {
			return 0
		}
		return max(float64(c-p)/dt, 0)
	}
	mode := f.mode()
	out := &shardSnapshot{
		Group: shardGroup, Ranges: f.cfg.ranges, HashField: string(shard.UID),
		Mode: mode, ModeNote: f.modeNote(mode), MemberTTLMs: ms(f.cfg.memberTTL),
		Owners: f.delivering(), Members: []memberSnapshot{}, CanAdd: len(f.live()) < maxMembers,
	}
	for i := range out.Owners {
		if out.Owners[i] == nil {
			out.Owners[i] = []string{}
		}
	}
	if f.sim != nil {
		n := f.sim.count()
		out.ClusterObjects = &n
	}
	keys := map[string]struct{}{}
	for _, m := range f.shown() {
		st, dropped := m.getState()
		status := m.status()
		c, p := cur.members[m.name], prev.members[m.name]
		mj := memberSnapshot{
			Name: m.name, ID: m.c.ActorSystem.ID, State: string(st), Dropped: dropped,
			MessagesDropped: m.part.dropped.Load(), Synced: status.Synced,
			Ranges: []int{}, View: []string{}, Mode: status.Mode.String(), Filtered: status.Filtered,
			Failed: status.Failed, Handlers: []memberHandler{},
			Stages: map[string]float64{
				"reflector": rate(c.stats.ReflectorEvents, p.stats.ReflectorEvents),
				"fifo":      rate(c.stats.QueueOut, p.stats.QueueOut),
				"indexer":   rate(c.stats.IndexerEvents, p.stats.IndexerEvents),
			},
		}
		m.mu.Lock()
		ended := m.ended
		m.mu.Unlock()
		if ended.IsZero() {
			ended = cur.at
		}
		mj.UpS = ended.Sub(m.started).Seconds()
		if st == memberLive {
			mj.PartitionedS = m.part.left(cur.at).Seconds()
		}
		if !m.hasStopped() {
			for _, r := range m.inf.Ranges() {
				mj.Ranges = append(mj.Ranges, r.Index)
			}
			ks := m.inf.GetIndexer().ListKeys()
			mj.CacheSize = len(ks)
			if st == memberLive || st == memberLeaving {
				out.Cached += len(ks)
				for _, k := range ks {
					keys[k] = struct{}{}
				}
			}
		}
		for _, id := range status.View {
			mj.View = append(mj.View, f.nameOf(id))
		}
		prevH := map[string]actors.HandlerStats{}
		for _, h := range p.stats.Handlers {
			prevH[h.Name] = h
		}
		for _, h := range c.stats.Handlers {
			mj.Handlers = append(mj.Handlers, memberHandler{Name: h.Name, Rate: rate(h.Delivered, prevH[h.Name].Delivered),
				Backlog: h.Backlog, Delivered: h.Delivered, Panics: h.Panics})
		}
		if m.ctl != nil {
			cs := m.ctl.stats()
			mj.WorkqueueDepth, mj.Reconciles, mj.ReleasedKeys = cs.depth, c.reconciles, cs.released
			mj.ReconcileRate = rate(c.reconciles, p.reconciles)
		}
		out.Members = append(out.Members, mj)
	}
	out.Distinct = len(keys)
	tl := f.timeline(start)
	out.Handovers = tl[:min(len(tl), maxTimeline)]
	return out
}
