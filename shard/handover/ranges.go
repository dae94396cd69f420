package handover

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
	// delivered: the token this member last delivered the range under, up
	// to its release (0: never); seen: the newest token another member
	// said (Hello.Tokens) it delivers the range under. A claim's token is
	// above both; placement reads them too (movedOnSince).
	delivered, seen uint64
	// final: what this member's handlers had been given when it last
	// released the range (its own Handoff, with its final position), sent
	// with every Released of the range, to whichever member asks. It is
	// this member's own data, never another's: the range's record in the
	// API server holds the same position (the shell wrote it before it
	// reported the release), so an answer that is lost, or that goes to a
	// member whose claim is given up, loses nothing: the activation
	// resumes from the newest position it finds.
	final *Handoff
}

// staleAskTicks: an ask for a range this member delivers is answered (the
// range drained and released) only within that many ticks of its arrival.
// An asker that still wants the range asks again every tick; one that has
// given the attempt up (its view moved the range elsewhere) does not, and
// releasing to it would leave the range with nobody ready to deliver it.
const staleAskTicks = 3

// rangeState is one of the range's lifecycle states, each with its own
// data:
//
//	idle → syncing → acquiring → claiming → active → deactivating → idle
//	          └──────────┴───────────┴→ stopping → idle
type rangeState interface{ name() string }

// idle: no informer runs for the range here. releasedTo is the member
// the range was last released to ("" when none), at tick at: this
// member's Hellos say so (Move) for a while, so that the others place the
// range there (holderOf).
type idle struct {
	releasedTo MemberID
	at         int
}

// syncing: the range's informer lists and watches it, without handlers.
type syncing struct{}

// acquiring: synced; the members that could deliver the range are asked
// to release it.
type acquiring struct {
	// pending: the members that have not answered this epoch and whose
	// lease is not void; asked: those asked in this attempt.
	pending, asked map[MemberID]struct{}
	// holders: members that said they deliver the range (their last
	// Hello), in pending but asked only once every other member has
	// answered: while some member cannot answer, they keep delivering it.
	holders map[MemberID]struct{}
	// handoff: the range's previous deliverer's Handoff (the highest
	// token's), and who sent it.
	handoff *Handoff
	prev    MemberID
	// delivAsked: the held-back members asked (the range's deliverers),
	// with the tick of the last ask; answered: one of them released the
	// range to this member.
	delivAsked map[MemberID]int
	answered   bool
}

// claiming: every member has answered or is void, and no deliverer's
// release named this member; it waits for a lease write that started after
// that, whose resourceVersion is the range's fencing token. One write
// serves every range claimed meanwhile.
type claiming struct {
	after   uint64 // a write numbered above this one
	handoff *Handoff
	prev    MemberID
}

// active: the handlers get the range, under token.
type active struct {
	token uint64
}

// deactivating: the range is being drained and stopped, to be released to
// member to ("" when none), for its ask of epoch toEpoch, since tick at;
// timeUp: the drain's bound was sent (DrainTimeUp).
type deactivating struct {
	token   uint64
	to      MemberID
	toEpoch uint64
	at      int
	timeUp  bool
}

// stopping: the informer of a range no handler saw is being stopped. A
// handoff it was given for the claim given up goes nowhere: the range's
// record, and the leases, hold its position for the next owner.
type stopping struct{}

func (*idle) name() string         { return "idle" }
func (*syncing) name() string      { return "syncing" }
func (*acquiring) name() string    { return "acquiring" }
func (*claiming) name() string     { return "claiming" }
func (*active) name() string       { return "active" }
func (*deactivating) name() string { return "deactivating" }
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
	for _, r := range m.Ranges {
		if r < 0 || r >= len(c.ranges) {
			continue
		}
		ri := &c.ranges[r]
		c.takeHandoff(r, m.From, handoffOf(m, r))
		if ri.epoch != m.Epoch {
			continue // an answer to another attempt
		}
		if st, ok := ri.state.(*acquiring); ok {
			if _, deliv := st.delivAsked[m.From]; deliv {
				st.answered = true
			}
			delete(st.pending, m.From)
			delete(st.holders, m.From)
		}
	}
}

// takeHandoff takes a previous deliverer's Handoff, whatever attempt the
// answer that carried it was for, while the range is being claimed: the
// newest one counts. Only its position (and its version) is taken from it,
// and the activation resumes from the newest position of it, the range's
// record and the leases: a stale one cannot take a version back, and a
// late one adds nothing.
func (c *Core) takeHandoff(r int, from MemberID, h *Handoff) {
	if h == nil {
		return
	}
	got := *h
	got.From = h.deliverer(from)
	newer := func(old *Handoff) bool { return old == nil || got.Token > old.Token }
	switch st := c.ranges[r].state.(type) {
	case *acquiring:
		if newer(st.handoff) {
			st.handoff, st.prev = &got, got.From
		}
	case *claiming:
		// A late answer from a member whose lease went void first (a
		// leaver deletes its lease as its Released travels).
		if newer(st.handoff) {
			st.handoff, st.prev = &got, got.From
		}
	}
}

// sawDelivery records that member from said it delivers range r under
// token.
func (c *Core) sawDelivery(r int, from MemberID, token uint64) {
	if r < 0 || r >= len(c.ranges) || from == c.cfg.Self {
		return
	}
	ri := &c.ranges[r]
	ri.seen = max(ri.seen, token)
}

// deliverer is the member that delivered the range under h's token: h.From,
// or sender when h does not say (a handoff from a member that does not
// pass handoffs on).
func (h *Handoff) deliverer(sender MemberID) MemberID {
	if h.From != "" {
		return h.From
	}
	return sender
}

// handoffOf returns m's Handoff for range r, nil when it has none.
func handoffOf(m *Released, r int) *Handoff {
	var out *Handoff
	for i := range m.Handoffs {
		if h := &m.Handoffs[i]; h.Range == r && (out == nil || h.Token > out.Token) {
			out = h
		}
	}
	return out
}

func (c *Core) synced(m *RangeSynced) {
	if m.Range < 0 || m.Range >= len(c.ranges) {
		return
	}
	ri := &c.ranges[m.Range]
	if _, ok := ri.state.(*syncing); !ok || ri.epoch != m.Epoch {
		return
	}
	ri.state = &acquiring{pending: map[MemberID]struct{}{}, asked: map[MemberID]struct{}{}, holders: map[MemberID]struct{}{}}
}

func (c *Core) stopped(m *RangeStopped) {
	if m.Range < 0 || m.Range >= len(c.ranges) {
		return
	}
	ri := &c.ranges[m.Range]
	if ri.epoch != m.Epoch {
		return
	}
	switch st := ri.state.(type) {
	case *deactivating:
		ri.state = &idle{releasedTo: st.to, at: c.ticks}
		ri.delivered = st.token
		if m.Handoff != nil {
			h := *m.Handoff
			h.Next, h.NextEpoch = st.to, st.toEpoch
			ri.final = &h
		}
	case *stopping:
		ri.state = &idle{at: c.ticks}
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
	c.maybeRenew()
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
		// Every member has let the range go to this one: it holds the
		// range now, whatever its view says (it delivers it, and hands
		// it on warm to the owner that asks). Stopping here would leave
		// the range with no member ready to deliver it.
		if cutOff || c.failed != "" {
			c.stopRange(r)
		}
	case *acquiring:
		c.pursueClaim(r, st, mine)
	case *active:
		// Without the topology, or with nobody to hand over to, or once
		// a leave's time is up, stop delivering without an asker.
		if cutOff || c.failed != "" || c.forced || (c.leaving && len(c.members.view) == 0) {
			c.deactivate(r, "", 0)
		}
	}
}

// startWhenSettled starts an idle range this member owns (mine) once
// discovery is over and the view has stood for SettleTicks: copied from
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
	if mine && !ms.discovering && c.ticks-ms.viewAt >= c.cfg.SettleTicks && (from != "" || !c.inTransit(r) && c.mayAsk()) {
		ri.state = &syncing{}
		ri.epoch = c.nextEpoch()
		start := &StartRange{Range: r, Epoch: ri.epoch, From: from}
		if from == "" {
			start.Cold = c.coldWhy(r)
		}
		c.out.Send(ToRanges, start)
	}
}

// pursueClaim moves range r, being acquired, towards its claim (mine: the
// view gives r to this member): while r is this member's, it asks the
// members that may deliver r, once it may ask, and claims r when none is
// left to answer.
func (c *Core) pursueClaim(r int, st *acquiring, mine bool) {
	switch {
	case !mine:
		// The view moved the range on after its deliverer was asked: it
		// claims the range once the deliverer has released it (every
		// other member had answered), stops once that answer can no
		// longer come, and asks nothing more meanwhile.
		if st.answered && len(st.pending) == 0 && c.lease.synced {
			c.claim(r, st)
		} else if !c.deliverersAnswering(st) {
			c.stopRange(r)
		}
	case c.mayAsk(): // until then the deliverers go on delivering
		c.askNewMembers(r)
		c.dropVoid(st)
		if len(st.pending) == 0 {
			c.claim(r, st)
		}
	}
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

// mustHear are the members whose answer, or void lease, a range's new
// owner needs: every peer it heard from that has not said Gone, and every
// holder of a lease that is not void. A peer that left the topology, or an
// older incarnation on a node, may still deliver ranges (this member may
// have released some to it) until its lease is void.
func (c *Core) mustHear() []MemberID {
	set := map[MemberID]struct{}{}
	for id, p := range c.members.peers {
		if p.heard && p.ok && p.state != Gone && !c.isVoid(id) {
			set[id] = struct{}{}
		}
	}
	for id, l := range c.leases {
		if l.known && !l.void {
			set[id] = struct{}{}
		}
	}
	delete(set, c.cfg.Self)
	return sortedKeys(set)
}

// askNewMembers asks the members it must hear from that it has not asked
// in this attempt.
func (c *Core) askNewMembers(r int) {
	st := c.ranges[r].state.(*acquiring)
	for _, id := range c.mustHear() {
		if _, done := st.asked[id]; done {
			continue
		}
		if _, held := st.holders[id]; held {
			continue
		}
		if l := c.leases[id]; l != nil && l.void {
			continue
		}
		if p := c.members.peers[id]; p != nil && p.heard && containsInt(p.active, r) {
			// The range's deliverer is asked last: until every other member
			// has answered, it keeps delivering.
			st.holders[id] = struct{}{}
			st.pending[id] = struct{}{}
			continue
		}
		c.ask(r, id)
	}
	c.askHolders(r)
}

// askHolders asks the held-back members once every other one has answered.
func (c *Core) askHolders(r int) {
	st := c.ranges[r].state.(*acquiring)
	if len(st.holders) == 0 || len(st.pending) > len(st.holders) {
		return
	}
	for _, id := range sortedKeys(st.holders) {
		if _, still := st.pending[id]; still {
			c.ask(r, id)
			if st.delivAsked == nil {
				st.delivAsked = map[MemberID]int{}
			}
			st.delivAsked[id] = c.ticks
		}
	}
	clear(st.holders)
}

// deliverersAnswering: the range's deliverers have been asked to release
// it to this member and may be answering: the member waits for them only,
// each asked within staleAskTicks (plus one for the ask's way), or for
// nobody. A member whose view moves the range elsewhere meanwhile keeps
// its synced informer and its claim until then, asking no more: a
// deliverer that releases the range to it then finds it ready, rather than
// gone, and the range does not go without a member ready to deliver it.
func (c *Core) deliverersAnswering(st *acquiring) bool {
	if len(st.delivAsked) == 0 || len(st.pending) == 0 {
		return false
	}
	for id := range st.pending {
		if at, deliv := st.delivAsked[id]; !deliv || c.ticks-at > staleAskTicks+1 || c.isVoid(id) {
			return false
		}
	}
	return true
}

func (c *Core) ask(r int, id MemberID) {
	ri := &c.ranges[r]
	st := ri.state.(*acquiring)
	st.asked[id] = struct{}{}
	st.pending[id] = struct{}{}
	c.out.Send(c.addr(id), &Acquire{From: c.cfg.Self, Epoch: ri.epoch, Ranges: []int{r}})
}

// askAgain repeats the asks that have not been answered (a message may be
// lost, or come back undelivered).
func (c *Core) askAgain() {
	asks := map[MemberID]map[uint64][]int{}
	for r := range c.ranges {
		st, ok := c.ranges[r].state.(*acquiring)
		if !ok || c.owner(r) != c.cfg.Self {
			continue // not asked again once the view moved the range on
		}
		for id := range st.pending {
			if _, held := st.holders[id]; held {
				continue // not asked yet
			}
			if _, deliv := st.delivAsked[id]; deliv {
				st.delivAsked[id] = c.ticks
			}
			if asks[id] == nil {
				asks[id] = map[uint64][]int{}
			}
			asks[id][c.ranges[r].epoch] = append(asks[id][c.ranges[r].epoch], r)
		}
	}
	for _, id := range sortedKeys(asks) {
		for _, e := range sortedKeys(asks[id]) {
			c.out.Send(c.addr(id), &Acquire{From: c.cfg.Self, Epoch: e, Ranges: asks[id][e]})
		}
	}
}

// dropVoid stops waiting for members whose lease is void: they call no
// handler, and never will under that lease.
func (c *Core) dropVoid(st *acquiring) {
	for id := range st.pending {
		if l := c.leases[id]; l != nil && l.void {
			delete(st.pending, id)
			delete(st.holders, id)
		}
	}
}

// claim: every member has answered or is void, so none delivers the range
// or will before it asks this one. When the deliverer's release wrote the
// range's record naming this member for this attempt, that write is the
// claim, and the range goes to the handlers under its version at once
// (while this member's own claim is valid); else the member waits for a
// lease write that starts now (activate).
func (c *Core) claim(r int, st *acquiring) {
	if h := st.handoff; h != nil && h.Record > 0 && h.Next == c.cfg.Self && h.NextEpoch == c.ranges[r].epoch && c.lease.validUntil > c.now {
		c.activateRange(r, h.Record, h, st.prev)
		return
	}
	c.ranges[r].state = &claiming{after: c.lease.seq, handoff: st.handoff, prev: st.prev}
}

func (c *Core) deactivate(r int, to MemberID, toEpoch uint64) {
	ri := &c.ranges[r]
	d := &deactivating{to: to, toEpoch: toEpoch, at: c.ticks}
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

func (c *Core) answerDeferred(r int) {
	ri := &c.ranges[r]
	if len(ri.deferred) == 0 {
		return
	}
	for _, id := range sortedKeys(ri.deferred) {
		e := ri.deferred[id]
		if !c.members.isCurrent(id) && !c.holdsLease(id) {
			delete(ri.deferred, id) // gone: it owns nothing
			continue
		}
		if c.owner(r) != id {
			continue // not the owner in this member's view: wait
		}
		if _, act := ri.state.(*active); act && c.ticks-ri.askedAt[id] > staleAskTicks {
			delete(ri.deferred, id) // asked again if the asker still wants it
			continue
		}
		switch ri.state.(type) {
		case *idle:
			rel := c.releaseFor(id, e)
			rel.Ranges = append(rel.Ranges, r)
			if ri.final != nil {
				rel.Handoffs = append(rel.Handoffs, *ri.final)
			}
			delete(ri.deferred, id)
		case *active:
			c.deactivate(r, id, e)
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
	keys := make([]releaseKey, 0, len(c.released))
	for k := range c.released {
		keys = append(keys, k)
	}
	sortReleaseKeys(keys)
	for _, k := range keys {
		c.out.Send(c.addr(k.to), c.released[k])
		delete(c.released, k)
	}
}

// activate gives the claimed ranges whose lease write started after their
// claim to the handlers, under that write's token.
func (c *Core) activate(seq uint64, token uint64) {
	if c.lease.validUntil <= c.now {
		return // the claim lapsed; the next tick fences
	}
	for r := range c.ranges {
		ri := &c.ranges[r]
		st, ok := ri.state.(*claiming)
		if !ok || st.after >= seq {
			continue
		}
		c.activateRange(r, token, st.handoff, st.prev)
	}
}

// activateRange gives range r to the handlers under token, continuing from
// handoff, which prev sent.
func (c *Core) activateRange(r int, token uint64, handoff *Handoff, prev MemberID) {
	c.helloDue = true
	ri := &c.ranges[r]
	ri.state = &active{token: token}
	c.out.Send(ToRanges, &ActivateRange{Range: r, Epoch: ri.epoch, Token: token, From: prev, Handoff: handoff})
}
