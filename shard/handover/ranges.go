package handover

import (
	"cmp"
	"maps"
	"slices"
)

// rangeInfo is one range on this member: its lifecycle state, and the
// asks of other members for it.
type rangeInfo struct {
	state rangeState
	// epoch is that of this member's latest attempt on the range (syncing
	// to active), or of the informer being stopped.
	epoch uint64
	// deferred: the members that asked for the range and have not been
	// answered, with the epoch they asked with.
	deferred map[MemberID]uint64
	// lastAsk: the latest epoch each member asked for the range with.
	lastAsk map[MemberID]uint64
	// askedAt: the tick each member's last ask arrived at.
	askedAt map[MemberID]int
	// rec: the range's record as this member knows it (the newest
	// generation it saw: a snapshot, an answer, its own writes); free: the
	// generation up to which rec's holder said it does not deliver the
	// range (Released.Records; 0: it did not say).
	rec  RecordState
	free uint64
}

// staleAskTicks: an ask for a range this member delivers is answered (the
// range drained and released) only within that many ticks of its arrival.
// An asker that still wants the range asks again every tick; one that has
// given the attempt up (its view moved the range elsewhere) does not, and
// releasing to it would leave the range with nobody ready to deliver it.
const staleAskTicks = 3

// settleTicks is how long the view must stay the same before the member
// starts the ranges it gained.
const settleTicks = 1

// rangeState is one of the range's lifecycle states, each with its own
// data:
//
//	idle → syncing → acquiring → claiming → active → deactivating → idle
//	          │          │           │                      └→ unrecorded → idle
//	          └──────────┴───────────┴→ stopping → idle
type rangeState interface{ name() string }

// idle: no informer runs for the range here.
type idle struct{}

// syncing: the range's informer lists and watches it, without handlers.
// from: the member that delivered it at the start; listedAt: the tick at
// which it synced (0: not yet) with a watch that had sent nothing; live:
// the watch has sent something (RangeLive came first).
type syncing struct {
	from     MemberID
	listedAt int
	live     bool
}

// acquiring: synced; the range is claimed once the record allows it, and
// its holder is asked for it meanwhile.
type acquiring struct {
	// asked: the holder asked last ("" for none), at tick askedAt.
	asked   MemberID
	askedAt int
	// retryAt: a claim whose write failed is tried again from this tick
	// on, not at once: a request that fails at once (a client's rate
	// limiter out of time) would otherwise be repeated at every step.
	retryAt int
}

// claiming: the member's claim of the record, at the generation it knows,
// is being written (ClaimRecords).
type claiming struct{}

// active: the handlers get the range, under token.
type active struct {
	token uint64
}

// deactivating: the range is being drained and stopped, since tick at;
// timeUp: the drain's bound was sent (DrainTimeUp).
type deactivating struct {
	token  uint64
	at     int
	timeUp bool
}

// unrecorded: the range was released, and the write of its final position
// failed: its record still names this member without it. No other member
// may take the range by this member's answer until the write lands (it
// would resume from an older position, and wait for an older version):
// the write is tried again each tick (ReleaseRecord; writing: one is under
// way), and the asks wait. A leave whose time is up ends without it: the
// lease's release then lets the next owner take the range, from the
// positions the released lease carries.
type unrecorded struct {
	writing bool
}

// stopping: the informer of a range no handler saw is being stopped.
type stopping struct{}

func (*idle) name() string         { return "idle" }
func (*syncing) name() string      { return "syncing" }
func (*acquiring) name() string    { return "acquiring" }
func (*claiming) name() string     { return "claiming" }
func (*active) name() string       { return "active" }
func (*deactivating) name() string { return "deactivating" }
func (*unrecorded) name() string   { return "unrecorded" }
func (*stopping) name() string     { return "stopping" }

func (c *Core) acquire(m *Acquire) {
	if m.From == c.cfg.Self {
		return
	}
	p := c.members.peer(m.From)
	if p.heard && !p.ok {
		c.out.Send(c.addr(m.From), &Reject{From: c.cfg.Self, Reason: "settings differ"})
		return
	}
	c.observe(m.Epoch)
	for _, r := range m.Ranges {
		if r < 0 || r >= len(c.ranges) {
			continue
		}
		ri := &c.ranges[r]
		if ri.lastAsk == nil {
			ri.lastAsk = map[MemberID]uint64{}
		}
		if m.Epoch < ri.lastAsk[m.From] {
			continue // older than an ask already seen from that member
		}
		ri.lastAsk[m.From] = m.Epoch
		if ri.deferred == nil {
			ri.deferred = map[MemberID]uint64{}
			ri.askedAt = map[MemberID]int{}
		}
		ri.deferred[m.From] = m.Epoch
		ri.askedAt[m.From] = c.ticks
	}
}

func (c *Core) releasedMsg(m *Released) {
	c.observe(m.Epoch)
	for _, rs := range m.Records {
		if rs.Range < 0 || rs.Range >= len(c.ranges) {
			continue
		}
		c.learnRecord(rs)
		if ri := &c.ranges[rs.Range]; rs.Holder == m.From && rs.Gen > ri.free && ri.rec.Holder == m.From {
			ri.free = rs.Gen
		}
	}
}

// learnRecord takes a record state, if newer than the one known.
func (c *Core) learnRecord(rs RecordState) {
	if rs.Range < 0 || rs.Range >= len(c.ranges) {
		return
	}
	ri := &c.ranges[rs.Range]
	if rs.Gen > ri.rec.Gen {
		ri.rec = rs
	}
}

// synced: a range another member delivers is asked for once its watch
// has sent something (live), or LiveTicks after it synced. Its informer
// has synced once its list (or a warm start's copy) is in its cache; the
// API server replays what happened since the list's version only some 50
// to 200 ms after the watch opens. Asked for at once, its handlers would
// wait for that replay after the previous deliverer has stopped; asked
// for once the watch has sent something, the wait comes before the
// switch, while the range is still delivered. A range with no change
// since its list sends nothing: the ticks bound the wait.
func (c *Core) synced(m *RangeSynced) {
	if m.Range < 0 || m.Range >= len(c.ranges) {
		return
	}
	ri := &c.ranges[m.Range]
	st, ok := ri.state.(*syncing)
	if !ok || ri.epoch != m.Epoch || st.listedAt > 0 {
		return
	}
	if m.Live || st.live || st.from == "" {
		ri.state = &acquiring{}
		return
	}
	st.listedAt = max(c.ticks, 1)
}

// live: the watch of range r's informer (epoch) has sent something, before
// or after the informer synced.
func (c *Core) live(r int, epoch uint64) {
	if r < 0 || r >= len(c.ranges) {
		return
	}
	ri := &c.ranges[r]
	st, ok := ri.state.(*syncing)
	switch {
	case !ok || ri.epoch != epoch:
	case st.listedAt > 0:
		ri.state = &acquiring{}
	default:
		st.live = true
	}
}

// liveTimeUp asks for the synced ranges whose watch has sent nothing for
// LiveTicks.
func (c *Core) liveTimeUp() {
	for r := range c.ranges {
		ri := &c.ranges[r]
		if st, ok := ri.state.(*syncing); ok && st.listedAt > 0 && c.ticks-st.listedAt >= c.cfg.LiveTicks {
			c.live(r, ri.epoch)
		}
	}
}

func (c *Core) stopped(m *RangeStopped) {
	if m.Range < 0 || m.Range >= len(c.ranges) {
		return
	}
	ri := &c.ranges[m.Range]
	if m.Record != nil {
		c.learnRecord(*m.Record)
	}
	if ri.epoch != m.Epoch {
		return
	}
	switch st := ri.state.(type) {
	case *deactivating:
		if m.Unrecorded {
			ri.state = &unrecorded{}
		} else {
			ri.state = &idle{}
		}
	case *unrecorded:
		if m.Unrecorded {
			st.writing = false // tried again at the next tick
		} else {
			ri.state = &idle{}
		}
	case *stopping:
		ri.state = &idle{}
	}
}

// recordAgain writes again the releases whose write failed, one at a time
// per range.
func (c *Core) recordAgain() {
	for r := range c.ranges {
		if st, ok := c.ranges[r].state.(*unrecorded); ok && !st.writing {
			st.writing = true
			c.out.Send(ToRanges, &ReleaseRecord{Range: r, Epoch: c.ranges[r].epoch})
		}
	}
}

// reconcile moves every range towards what the view says, and answers the
// asks that can be answered.
func (c *Core) reconcile() {
	ms := &c.members
	if !ms.started {
		return
	}
	if ms.discovering && len(ms.waiting) == 0 && ms.waited {
		ms.discovering = false // every node has answered
	}
	c.computeView()
	cutOff := !ms.inTopo
	for r := range c.ranges {
		c.stepRange(r, cutOff)
		c.answerDeferred(r)
	}
	c.settled = c.viewReached()
}

// stepRange moves range r one step towards what the view says (cutOff:
// this member is not in the topology).
func (c *Core) stepRange(r int, cutOff bool) {
	ri := &c.ranges[r]
	mine := c.owner(r) == c.cfg.Self
	switch st := ri.state.(type) {
	case *idle:
		c.startWhenSettled(r, mine)
	case *syncing:
		if !mine {
			c.stopRange(r)
		}
	case *claiming:
		// The claim's write may land: the range then goes to the
		// handlers, whatever the view says (and on warm to the owner
		// that asks).
		if cutOff || c.failed != "" {
			c.stopRange(r)
		}
	case *acquiring:
		c.pursueClaim(r, st, mine)
	case *active:
		// Without the topology, or with nobody to hand over to, or once
		// a leave's time is up, stop delivering without an asker.
		if cutOff || c.failed != "" || c.forced || (c.leaving && len(c.members.view) == 0) {
			c.deactivate(r, "")
		}
	}
}

// startWhenSettled starts an idle range this member owns (mine) once
// discovery is over and the view has stood for settleTicks: copied from
// the member that delivers it, or, when none does, listed once it is not
// moving to another member and this member may ask.
func (c *Core) startWhenSettled(r int, mine bool) {
	ms := &c.members
	ri := &c.ranges[r]
	from := c.holderOf(r)
	if from == c.cfg.Self {
		from = ""
	}
	// A range that no member delivers is listed only once this member may
	// ask for it: listed before, it may move on (a member that joins
	// meanwhile takes it) before this one could deliver it, and its next
	// owner, with no deliverer to copy it from, lists it again.
	if mine && !ms.discovering && c.ticks-ms.viewAt >= settleTicks && (from != "" || !c.inTransit(r) && c.ready()) {
		ri.state = &syncing{from: from}
		ri.epoch = c.nextEpoch()
		start := &StartRange{Range: r, Epoch: ri.epoch, From: from}
		if from == "" {
			start.Cold = c.coldWhy(r)
			// The others learn at once that this member lists the range:
			// one that places it first would list it too.
			c.helloDue = true
		}
		c.out.Send(ToRanges, start)
	}
}

// pursueClaim moves range r, being acquired, towards its claim (mine: the
// view gives r to this member): once this member knows its lease and the
// records, it claims r when the record allows it, and asks the record's
// holder for it otherwise.
//
// A range the view moved on after its holder was asked is claimed once
// the holder has let it go, and stopped once that can no longer come (the
// holder drops asks older than staleAskTicks): a holder that releases the
// range for this member's ask finds it ready, and the range does not go
// without a member ready to deliver it. Otherwise it is stopped at once.
func (c *Core) pursueClaim(r int, st *acquiring, mine bool) {
	valid := c.ready() && c.lease.validUntil > c.now
	switch {
	case !mine && st.asked != "" && valid && c.mayClaim(r):
		c.claim(r)
	case !mine && (st.asked == "" || c.ticks-st.askedAt > staleAskTicks+1 || c.isVoid(st.asked)):
		c.stopRange(r)
	case !mine || !valid || c.ticks < st.retryAt:
	case c.mayClaim(r):
		c.claim(r)
	default:
		if h := c.ranges[r].rec.Holder; st.asked != h {
			st.asked, st.askedAt = h, c.ticks
			c.ask(r, h)
		}
	}
}

// ready: this member's lease watch has shown its own lease, so it knows
// the leases and the records as they were after its lease's creation.
func (c *Core) ready() bool { return c.lease.synced }

// mayClaim: no member delivers range r under the record this member knows,
// or ever will: the record names none, this member, a member whose lease is
// void or that said Gone, or one that said it does not deliver the range
// under that generation. While a member of another protocol version holds
// a lease, whose deliveries the records do not show, it claims nothing.
func (c *Core) mayClaim(r int) bool {
	if c.otherProtocol() {
		return false
	}
	ri := &c.ranges[r]
	h := ri.rec.Holder
	if h == "" || h == c.cfg.Self || c.isVoid(h) || ri.free >= ri.rec.Gen {
		return true
	}
	p := c.members.peers[h]
	return p != nil && p.heard && p.state == Gone
}

// viewReached: discovery is over, this member is in the topology and has
// not failed, and it delivers exactly the ranges its view gives it.
func (c *Core) viewReached() bool {
	ms := &c.members
	if ms.discovering || !ms.inTopo || c.failed != "" {
		return false
	}
	for r := range c.ranges {
		_, act := c.ranges[r].state.(*active)
		if (c.owner(r) == c.cfg.Self) != act {
			return false
		}
	}
	return true
}

func (c *Core) stopRange(r int) {
	ri := &c.ranges[r]
	ri.state = &stopping{}
	c.out.Send(ToRanges, &StopRange{Range: r, Epoch: ri.epoch})
}

func (c *Core) ask(r int, id MemberID) {
	c.out.Send(c.addr(id), &Acquire{From: c.cfg.Self, Epoch: c.ranges[r].epoch, Ranges: []int{r}})
}

// askAgain repeats the asks that have not been answered (a message may be
// lost, or come back undelivered).
func (c *Core) askAgain() {
	asks := map[MemberID]map[uint64][]int{}
	for r := range c.ranges {
		st, ok := c.ranges[r].state.(*acquiring)
		if !ok || st.asked == "" || st.asked != c.ranges[r].rec.Holder || c.owner(r) != c.cfg.Self {
			continue
		}
		st.askedAt = c.ticks
		if asks[st.asked] == nil {
			asks[st.asked] = map[uint64][]int{}
		}
		asks[st.asked][c.ranges[r].epoch] = append(asks[st.asked][c.ranges[r].epoch], r)
	}
	for _, id := range sortedKeys(asks) {
		for _, e := range sortedKeys(asks[id]) {
			c.out.Send(c.addr(id), &Acquire{From: c.cfg.Self, Epoch: e, Ranges: asks[id][e]})
		}
	}
}

// claim writes the range's record naming this member, on the generation
// it knows (flushClaims sends the step's claims together).
func (c *Core) claim(r int) {
	ri := &c.ranges[r]
	ri.state = &claiming{}
	c.claims = append(c.claims, RecordClaim{Range: r, Epoch: ri.epoch, Gen: ri.rec.Gen})
}

func (c *Core) flushClaims() {
	if len(c.claims) > 0 {
		c.out.Send(ToLease, &ClaimRecords{Claims: c.claims})
		c.claims = nil
	}
}

// recordsClaimed takes the claims' outcomes: a claim written goes to the
// handlers under the write's version, while this member's claim is valid
// (one written after it lapsed is claimed again: the record names this
// member); one refused is decided again at once, one failed from the next
// tick on.
func (c *Core) recordsClaimed(m *RecordsClaimed) {
	c.now = max(c.now, m.Now)
	for _, res := range m.Results {
		if res.Range < 0 || res.Range >= len(c.ranges) {
			continue
		}
		c.learnRecord(res.Record)
		ri := &c.ranges[res.Range]
		_, ok := ri.state.(*claiming)
		switch {
		case !ok || ri.epoch != res.Epoch:
		case res.OK && c.lease.validUntil > c.now:
			c.activateRange(res.Range, res.Token)
		case !res.OK && res.Record.Gen > 0: // refused: the record as it is now
			ri.state = &acquiring{}
		default: // failed, or written once this member's claim had lapsed
			ri.state = &acquiring{retryAt: c.ticks + 1}
		}
	}
}

func (c *Core) deactivate(r int, to MemberID) {
	ri := &c.ranges[r]
	d := &deactivating{at: c.ticks}
	if st, ok := ri.state.(*active); ok {
		d.token = st.token
	}
	ri.state = d
	c.out.Send(ToRanges, &DeactivateRange{Range: r, Epoch: ri.epoch, To: to})
}

// drainTimeUp ends the drains that have run DrainTicks: the shell then
// releases the range with what its handlers were given.
func (c *Core) drainTimeUp() {
	if c.cfg.DrainTicks < 0 {
		return
	}
	for r := range c.ranges {
		if d, ok := c.ranges[r].state.(*deactivating); ok && !d.timeUp && c.ticks-d.at >= c.cfg.DrainTicks {
			d.timeUp = true
			c.out.Send(ToRanges, &DrainTimeUp{Range: r, Epoch: c.ranges[r].epoch})
		}
	}
}

// answerDeferred answers the asks for range r: at once when this member
// does not deliver it, with the record as it knows it; once drained and
// released when it does, for the owner in its view.
func (c *Core) answerDeferred(r int) {
	ri := &c.ranges[r]
	for _, id := range sortedKeys(ri.deferred) {
		e := ri.deferred[id]
		if !c.members.isCurrent(id) && !c.holdsLease(id) {
			delete(ri.deferred, id) // gone: it owns nothing
			continue
		}
		switch ri.state.(type) {
		case *active:
			switch {
			case c.owner(r) != id: // not the owner in this member's view: wait
			case c.ticks-ri.askedAt[id] > staleAskTicks:
				delete(ri.deferred, id) // asked again if the asker still wants it
			default:
				c.deactivate(r, id)
			}
		case *deactivating, *claiming, *unrecorded:
			// A claim in flight may have written the record already (the
			// records watch can show the write before its answer comes):
			// answered once its outcome is known. A release is answered
			// once its write has landed.
		default:
			rel := c.releaseFor(id, e)
			rel.Ranges = append(rel.Ranges, r)
			rel.Records = append(rel.Records, ri.rec)
			delete(ri.deferred, id)
		}
	}
}

// releaseFor is the Released gathered for member to's ask with epoch e,
// sent at the end of the step.
func (c *Core) releaseFor(to MemberID, e uint64) *Released {
	k := releaseKey{to: to, epoch: e}
	rel := c.released[k]
	if rel == nil {
		rel = &Released{From: c.cfg.Self, Epoch: e}
		c.released[k] = rel
	}
	return rel
}

func (c *Core) flushReleased() {
	if len(c.released) == 0 {
		return
	}
	keys := slices.SortedFunc(maps.Keys(c.released), func(a, b releaseKey) int {
		return cmp.Or(cmp.Compare(a.to, b.to), cmp.Compare(a.epoch, b.epoch))
	})
	for _, k := range keys {
		c.out.Send(c.addr(k.to), c.released[k])
		delete(c.released, k)
	}
}

// activateRange gives range r to the handlers under token.
func (c *Core) activateRange(r int, token uint64) {
	c.helloDue = true
	ri := &c.ranges[r]
	ri.state = &active{token: token}
	c.out.Send(ToRanges, &ActivateRange{Range: r, Epoch: ri.epoch, Token: token})
}
