package handover

import (
	"fmt"
	"slices"
	"strings"
)

// membership is what a member knows of the others: the topology's nodes,
// the peers it heard, its view and each range's owner.
type membership struct {
	topo  map[NodeID]struct{}
	peers map[MemberID]*peer
	// current is the incarnation on each node that said Hello last (the
	// newest, by JoinedAt): an older one on the same node is superseded.
	current map[NodeID]MemberID

	started     bool // self's node has been in a topology
	inTopo      bool
	discovering bool
	waiting     map[NodeID]struct{} // discovery: nodes not heard from yet
	// waited: discovery has waited for some node; a member alone in the
	// topology waits DiscoveryTicks for others starting with it.
	waited     bool
	discoverAt int

	view   []MemberID
	owners []MemberID // per range; nil before the first view
	// placedView, placedHolders and placedListing are what owners were
	// placed from.
	placedView, placedHolders []MemberID
	placedListing             []bool
	// viewAt is the tick the view last changed at.
	viewAt int
}

type peer struct {
	heard    bool
	ok       bool // same settings
	state    PeerState
	joinedAt int64
	// active, listing: the ranges the member said it delivers, and those
	// it said it has started and does not deliver yet, in its last Hello.
	active, listing []int
	// excludedAt is the tick since which its view leaves this member out
	// (-1: it does not).
	excludedAt int
	// knowsMe, hearsMe: its last Hello said that its topology has this
	// member's node (Hello.KnowsYou), and that it heard this member lately
	// (Hello.HeardYou). A peer that knows this member and does not hear it
	// cannot be reached by it (unreachable).
	knowsMe, hearsMe bool
	// heardAt is the tick its last Hello arrived at.
	heardAt int
}

func (ms *membership) init() {
	ms.topo = map[NodeID]struct{}{}
	ms.peers = map[MemberID]*peer{}
	ms.current = map[NodeID]MemberID{}
}

// knows: id's node is in this member's topology.
func (ms *membership) knows(id MemberID) bool {
	_, ok := ms.topo[id.Node()]
	return ok
}

func (ms *membership) peer(id MemberID) *peer {
	p := ms.peers[id]
	if p == nil {
		p = &peer{excludedAt: -1}
		ms.peers[id] = p
	}
	return p
}

// isCurrent: id is the newest incarnation heard of on a node of the
// topology, with the same settings, and has not said Gone.
func (ms *membership) isCurrent(id MemberID) bool {
	p := ms.peers[id]
	return p != nil && p.heard && p.ok && p.state != Gone && ms.knows(id) && ms.current[id.Node()] == id
}

func (c *Core) topology(m *Topology) {
	ms := &c.members
	prev := ms.topo
	ms.topo = make(map[NodeID]struct{}, len(m.Nodes))
	for _, n := range m.Nodes {
		ms.topo[n] = struct{}{}
	}
	_, in := ms.topo[c.cfg.Self.Node()]
	wasIn := ms.inTopo
	ms.inTopo = in
	if !in {
		if wasIn {
			c.fenceLeftOut("this member left the cluster's topology: its provider dropped it, and protoactor never shows it again")
		}
		return
	}
	if !ms.started {
		ms.started = true
		c.renew()
	}
	if !wasIn {
		c.discover()
		return
	}
	c.greetNewNodes(prev)
}

// discover starts the discovery of a member that enters the topology: it
// says Hello to every other node of it, and waits for their answers.
func (c *Core) discover() {
	ms := &c.members
	ms.discovering = true
	ms.discoverAt = c.ticks
	ms.waiting = map[NodeID]struct{}{}
	ms.waited = false
	c.greetNewNodes(nil) // every node is new
}

// greetNewNodes says Hello to the nodes that joined the topology since
// prev, waits for them too while discovering, and stops waiting for the
// nodes that left it.
func (c *Core) greetNewNodes(prev map[NodeID]struct{}) {
	ms := &c.members
	self := c.cfg.Self.Node()
	for _, n := range sortedKeys(ms.topo) {
		if _, old := prev[n]; !old && n != self {
			c.sendHello(MemberID(n), false)
			if ms.discovering {
				// Members are still arriving (started together): wait for
				// them too.
				ms.waiting[n] = struct{}{}
				ms.waited = true
				ms.discoverAt = c.ticks
			}
		}
	}
	for n := range prev {
		if _, still := ms.topo[n]; !still {
			delete(ms.waiting, n)
		}
	}
}

func (ms *membership) discoveryTick(c *Core) {
	if ms.discovering && c.ticks-ms.discoverAt >= c.cfg.DiscoveryTicks {
		ms.discovering = false
	}
}

// sendHello says Hello to a member, or to whatever incarnation runs on a
// node (a MemberID without '#').
func (c *Core) sendHello(to MemberID, reply bool) {
	st := Joined
	switch {
	case c.done:
		st = Gone
	case c.leaving || c.failed != "":
		st = Leaving
	}
	var act, listing []int
	for r := range c.ranges {
		switch c.ranges[r].state.(type) {
		case *active, *deactivating:
			act = append(act, r)
		case *syncing, *acquiring, *claiming:
			listing = append(listing, r)
		}
	}
	c.out.Send(c.addr(to), &Hello{From: c.cfg.Self, Ranges: c.cfg.Ranges, HashField: c.cfg.HashField,
		JoinedAt: c.cfg.JoinedAt, State: st, Active: act, Listing: listing, View: slices.Clone(c.members.view), Reply: reply,
		KnowsYou: c.members.knows(to), HeardYou: c.hears(to)})
}

// broadcastHello says Hello to every node of the topology and to every
// holder of a lease that is not void (a member the provider dropped may
// still deliver ranges, and must hear that it was left out).
func (c *Core) broadcastHello() {
	self := c.cfg.Self.Node()
	sent := map[NodeID]bool{self: true}
	for _, n := range sortedKeys(c.members.topo) {
		if !sent[n] {
			sent[n] = true
			to := MemberID(n)
			if cur, ok := c.members.current[n]; ok {
				to = cur
			}
			c.sendHello(to, false)
		}
	}
	for _, id := range sortedKeys(c.leases) {
		if l := c.leases[id]; l.known && !l.void && id != c.cfg.Self && !sent[id.Node()] {
			sent[id.Node()] = true
			c.sendHello(id, false)
		}
	}
}

func (c *Core) hello(m *Hello) {
	if m.From == c.cfg.Self {
		return
	}
	ms := &c.members
	p := ms.peer(m.From)
	// wasHeard: this member heard it lately; if not, the Hellos it sent it
	// since said HeardYou false.
	wasHeard := c.hears(m.From)
	p.heard = true
	p.joinedAt = m.JoinedAt
	p.heardAt = c.ticks
	if cur, ok := ms.current[m.From.Node()]; !ok || cur == m.From || ms.peers[cur] == nil || ms.peers[cur].joinedAt <= m.JoinedAt {
		ms.current[m.From.Node()] = m.From
	}
	if c.rejectSettings(m, p) {
		delete(ms.waiting, m.From.Node())
		return
	}
	p.ok = true
	p.state = m.State
	p.active, p.listing = m.Active, m.Listing
	p.knowsMe, p.hearsMe = m.KnowsYou, m.HeardYou
	if !unreachable(p) {
		// Discovery waits for an answer that puts the node in the view:
		// a member that starts with this one says Hello before it heard
		// this member, and its next Hello says it does.
		delete(ms.waiting, m.From.Node())
	}
	if slices.Contains(m.View, c.cfg.Self) || m.State != Joined {
		p.excludedAt = -1
	} else if p.excludedAt < 0 {
		p.excludedAt = c.ticks
	}
	if m.State == Gone {
		c.forget(m.From)
	}
	if ms.started && (!m.Reply || !wasHeard) {
		// An answer; or, once this member hears a peer it did not, a
		// Hello that tells it so (as an answer, which is not answered).
		c.sendHello(m.From, true)
	}
}

// rejectSettings reports whether the Hello m comes from a member p with
// other settings (ranges or hash field) than this one: of the two, the
// younger fails, and the older sends it a Reject.
func (c *Core) rejectSettings(m *Hello, p *peer) bool {
	if m.Ranges == c.cfg.Ranges && m.HashField == c.cfg.HashField {
		return false
	}
	p.ok = false
	reason := fmt.Sprintf("%d ranges hashed on %q here, %d on %q at %s", c.cfg.Ranges, c.cfg.HashField, m.Ranges, m.HashField, m.From)
	if younger(c.cfg.JoinedAt, c.cfg.Self, m.JoinedAt, m.From) {
		c.fail(reason)
	} else {
		c.out.Send(c.addr(m.From), &Reject{From: c.cfg.Self, Reason: reason})
	}
	return true
}

// younger reports whether member a (joined at ja) joined after b.
func younger(ja int64, a MemberID, jb int64, b MemberID) bool {
	if ja != jb {
		return ja > jb
	}
	return a > b
}

// forget stops waiting for an answer from id, which said Gone: it delivers
// nothing and answers nothing more.
func (c *Core) forget(id MemberID) {
	for r := range c.ranges {
		delete(c.ranges[r].deferred, id)
	}
}

// healTick fences this member when a peer (current, or holding a lease)
// has left it out of its view for HealTicks: the peer's provider dropped
// this member's node (its keep-alive lapsed in a pause, say) and will not
// take it back, so only a new incarnation on a new node can rejoin. Two
// members whose providers dropped each other both rejoin. A peer whose
// topology has this member's node (Hello.KnowsYou) leaves it out because
// it does not hear it (it advertises an address no one reaches, or a cut
// holds one way): that says nothing of this member, and is no reason to
// fence it.
func (c *Core) healTick() {
	if !c.eligible() || c.members.discovering {
		return
	}
	for _, id := range sortedKeys(c.members.peers) {
		p := c.members.peers[id]
		if p.excludedAt >= 0 && p.ok && p.state == Joined && !p.knowsMe && (c.members.isCurrent(id) || c.holdsLease(id)) && c.ticks-p.excludedAt >= c.cfg.HealTicks {
			reason := fmt.Sprintf("member %s has left this one out of its view for %d ticks", id, c.ticks-p.excludedAt)
			if !c.members.isCurrent(id) {
				// Known by its lease alone: a member the provider dropped,
				// or one of another cluster whose group has this one's name
				// and keeps its leases in the same namespace.
				reason += fmt.Sprintf(" (%s is not in this member's cluster topology, only in the leases: if it belongs to another cluster, two groups share this group's name and lease namespace, and each needs its own)", id)
			}
			c.fenceLeftOut(reason)
			return
		}
	}
}

// unreachable: p's topology has this member's node but p has not heard
// it lately: this member's messages do not reach it. It stays out of this
// member's view, so that no range is placed where its handoff cannot go.
func unreachable(p *peer) bool { return p.knowsMe && !p.hearsMe }

// hears: this member heard id within hearTicks heartbeats (Hello.HeardYou).
func (c *Core) hears(id MemberID) bool {
	p := c.members.peers[id]
	return p != nil && p.heard && c.ticks-p.heardAt < hearTicks*c.cfg.HelloTicks
}

// hearTicks, in heartbeats, is how recent a Hello must be for HeardYou.
const hearTicks = 3

// computeView sets the group view and each range's owner.
func (c *Core) computeView() {
	ms := &c.members
	prev := ms.view
	view := make([]MemberID, 0, len(ms.peers)+1)
	if c.eligible() {
		view = append(view, c.cfg.Self)
	}
	for id, p := range ms.peers {
		if p.state == Joined && ms.isCurrent(id) && !unreachable(p) {
			view = append(view, id)
		}
	}
	slices.Sort(view)
	if !slices.Equal(prev, view) || ms.owners == nil {
		ms.view = view
		ms.viewAt = c.ticks
	}
	// Place is a pure function of the view and the holders: at rest,
	// nothing changes and the last owners stand.
	holders, listing := c.holders()
	if ms.owners != nil && slices.Equal(view, ms.placedView) && slices.Equal(holders, ms.placedHolders) && slices.Equal(listing, ms.placedListing) {
		return
	}
	ms.placedView, ms.placedHolders, ms.placedListing = view, holders, listing
	owners := Place(view, holders, listing, len(c.ranges), c.cfg.MaxMoves)
	if !slices.Equal(owners, ms.owners) {
		ms.owners = owners
		ms.viewAt = c.ticks
	}
}

// holders are each range's holder as this member knows it: its
// deliverer (holderOf), else the member that lists it (listerOf), and
// whether that holder lists it (nil: none does). A claim in flight counts
// as listing, as the claimer's Hellos say.
func (c *Core) holders() ([]MemberID, []bool) {
	out := make([]MemberID, len(c.ranges))
	var listing []bool
	for r := range out {
		h := c.holderOf(r)
		lists := false
		if h == "" {
			h = c.listerOf(r)
			lists = h != ""
		} else if h == c.cfg.Self {
			_, lists = c.ranges[r].state.(*claiming)
		}
		if lists {
			if listing == nil {
				listing = make([]bool, len(out))
			}
			listing[r] = true
		}
		out[r] = h
	}
	return out, listing
}

// listerOf is the member that lists range r, which no member delivers, as
// this member knows it ("" for none): itself, or a current peer by its
// last Hello (Hello.Listing); of several, as holderOf chooses.
func (c *Core) listerOf(r int) MemberID {
	self := false
	switch c.ranges[r].state.(type) {
	case *syncing, *acquiring, *claiming:
		self = true
	}
	return c.bestOf(r, self, func(p *peer) []int { return p.listing })
}

// holderOf is range r's holder as this member knows it ("" for none): the
// member that delivers it (itself, or a current peer by its last Hello);
// of several, as bestOf chooses. Else the member the range's last release
// was for (itself too: every member counts it alike), while it is current
// and no other member claimed the range since: without that, members that
// saw the release or the claim and not yet the new deliverer's Hello would
// place the range elsewhere, and start it with no holder to copy it from.
func (c *Core) holderOf(r int) MemberID {
	self := false
	switch c.ranges[r].state.(type) {
	case *active, *deactivating, *claiming:
		self = true
	}
	if out := c.bestOf(r, self, func(p *peer) []int { return p.active }); out != "" {
		return out
	}
	if rec := c.ranges[r].rec; rec.Next != "" && (rec.Holder == "" || rec.Holder == rec.Next) && (rec.Next == c.cfg.Self || c.members.isCurrent(rec.Next)) {
		return rec.Next
	}
	return ""
}

// bestOf is, of this member (self) and the current peers whose last Hello
// has range r in the ranges said gives, the one with the highest
// rendezvous score for r (of equal scores, itself, then the lowest id);
// "" for none.
func (c *Core) bestOf(r int, self bool, said func(*peer) []int) MemberID {
	ms := &c.members
	var out MemberID
	var best uint64
	if self {
		out, best = c.cfg.Self, score(c.cfg.Self, r)
	}
	for id, p := range ms.peers {
		if !slices.Contains(said(p), r) || !ms.isCurrent(id) {
			continue
		}
		if s := score(id, r); out == "" || s > best || s == best && out != c.cfg.Self && id < out {
			out, best = id, s
		}
	}
	return out
}

func (c *Core) owner(r int) MemberID { return c.members.owners[r] }

// coldWhy describes, for a log, why range r starts with no holder: the
// view, and each peer this member heard with its state and whether its
// last Hello said it delivers r.
func (c *Core) coldWhy(r int) string {
	ms := &c.members
	var b strings.Builder
	fmt.Fprintf(&b, "view %v; peers:", ms.view)
	for _, id := range sortedKeys(ms.peers) {
		p := ms.peers[id]
		if !p.heard {
			continue
		}
		fmt.Fprintf(&b, " %s(%s current=%t delivers=%t lease=%t)", id, p.state, ms.isCurrent(id), slices.Contains(p.active, r), c.holdsLease(id))
	}
	return b.String()
}

// inTransit: range r has no holder this member knows, but a member that
// was leaving said it delivers r within the last two heartbeats and has
// left the topology since: r is on its way to a member whose Hello has not
// come yet (the leaver's last Hello, which says where r went, may be lost
// as its process exits). A new owner waits for that Hello rather than list
// the range; after two heartbeats without one, r is taken as lost.
func (c *Core) inTransit(r int) bool {
	for _, id := range sortedKeys(c.members.peers) {
		p := c.members.peers[id]
		if p.heard && p.ok && p.state == Leaving && slices.Contains(p.active, r) && !c.members.isCurrent(id) &&
			c.ticks-p.heardAt < 2*c.cfg.HelloTicks {
			return true
		}
	}
	return false
}
