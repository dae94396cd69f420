package handover

import (
	"fmt"
	"strconv"
	"time"
)

// ownLease is this member's lease: its writes and the claim they give.
type ownLease struct {
	// seq numbers the writes asked for; inflight: one is running (the
	// shell answers each within RenewDeadline).
	seq      uint64
	inflight bool
	created  bool // a write has succeeded
	// lastAttempt is when the last write was asked for, lastOK when the
	// last successful one started.
	lastAttempt, lastOK time.Duration
	// validUntil: handler calls are allowed until then (RenewDeadline
	// after lastOK).
	validUntil time.Duration
	// token is the resourceVersion of the last successful write.
	token uint64
	// synced: a Leases snapshot showed this member's lease, so the watch
	// is past its creation and every lease created before it is known.
	synced bool
	// seen: the resourceVersion of this member's lease in the last
	// snapshot that showed it (0: none, or not a number).
	seen uint64
}

// peerLease is another member's lease, as this member observed it.
type peerLease struct {
	// version is the last resourceVersion seen, at seenAt (this member's
	// clock) for the first time; known: one was seen.
	version string
	seenAt  time.Duration
	known   bool
	// inSnapshot: in the last Leases snapshot; void: its holder calls no
	// handler under it: released (by its holder, or by a revoker at the
	// version it saw unchanged for LeaseDuration, this member or another),
	// or gone for LeaseDuration.
	inSnapshot, void bool
	// gone: deleted (it left a snapshot unreleased, or a check found none),
	// first seen so at goneAt. Anyone may delete a Lease (kubectl delete
	// lease): its holder may still call handlers until the renew deadline
	// after its last write, which started before the delete, so it is void
	// LeaseDuration after goneAt.
	gone     bool
	goneAt   time.Duration
	revoking bool
	checking bool
	// other: its holder runs another version of the protocol.
	other bool
}

// holdsLease: id has a lease that is not void, as far as this member
// knows.
func (c *Core) holdsLease(id MemberID) bool {
	l := c.leases[id]
	return l != nil && l.known && !l.void
}

// isVoid: id's lease is void: id calls no handler under it.
func (c *Core) isVoid(id MemberID) bool {
	l := c.leases[id]
	return l != nil && l.void
}

// otherProtocol: a member of another protocol version holds a lease that
// is not void.
func (c *Core) otherProtocol() bool {
	for _, l := range c.leases {
		if l.other && l.known && !l.void {
			return true
		}
	}
	return false
}

// renew asks for a write of this member's lease.
func (c *Core) renew() {
	c.lease.seq++
	c.lease.inflight = true
	c.lease.lastAttempt = c.now
	c.out.Send(ToLease, &RenewLease{Seq: c.lease.seq, Create: !c.lease.created})
}

// leaseTick renews the lease every RetryPeriod, fences this member once
// its claim has lapsed, and revokes the leases that stayed unchanged for
// LeaseDuration.
func (c *Core) leaseTick() {
	l := &c.lease
	if l.created && c.now >= l.validUntil {
		c.fence(fmt.Sprintf("the lease was not renewed within %v (last successful write started at %v, now %v)", c.cfg.RenewDeadline, l.lastOK, c.now))
		return
	}
	if !l.inflight && c.now-l.lastAttempt >= c.cfg.RetryPeriod {
		c.renew()
	}
	for _, id := range sortedKeys(c.leases) {
		p := c.leases[id]
		if p.gone && !p.void && c.now-p.goneAt >= c.cfg.LeaseDuration {
			p.void = true
		}
		if p.known && !p.void && !p.gone && !p.revoking && c.now-p.seenAt >= c.cfg.LeaseDuration {
			p.revoking = true
			c.out.Send(ToLease, &RevokeLease{Member: id, Version: p.version})
		}
	}
}

func (c *Core) renewed(m *LeaseRenewed) {
	c.now = max(c.now, m.Now)
	l := &c.lease
	if m.Seq == l.seq {
		l.inflight = false
	}
	if !l.created && l.seen != 0 && l.seen != m.Token {
		// A create (every write is one until the first succeeds) after a
		// snapshot showed an earlier one of this member's, whose answer was
		// lost: that lease was deleted since (revoked: its holder seemed
		// gone), and its revoker may have claimed ranges this member asked
		// for meanwhile. Its claims rest on the deleted lease.
		c.fence(fmt.Sprintf("the lease was deleted and created again (version %d seen, the create wrote %d)", l.seen, m.Token))
		return
	}
	l.created = true
	l.token = max(l.token, m.Token)
	l.lastOK = max(l.lastOK, m.Start)
	if until := m.Start + c.cfg.RenewDeadline; until > l.validUntil {
		l.validUntil = until
		c.out.Send(ToLease, &SetValidity{Until: until})
	}
}

func (c *Core) renewFailed(m *LeaseRenewFailed) {
	if m.Seq == c.lease.seq {
		c.lease.inflight = false
	}
	if m.Lost {
		c.fence("the lease was revoked or taken")
	}
}

func (c *Core) leaseSnapshot(m *Leases) {
	c.now = max(c.now, m.Now)
	seen := make(map[MemberID]bool, len(m.Leases))
	for _, rec := range m.Leases {
		seen[rec.Holder] = true
		if rec.Holder == c.cfg.Self {
			c.lease.synced = true
			c.lease.seen, _ = strconv.ParseUint(rec.Version, 10, 64)
			continue
		}
		p := c.leaseOf(rec.Holder)
		p.inSnapshot, p.other = true, rec.Other
		c.seeVersion(p, rec.Version)
	}
	released := make(map[MemberID]bool, len(m.Released))
	for _, id := range m.Released {
		released[id] = true
		if id == c.cfg.Self {
			continue
		}
		p := c.leaseOf(id)
		p.inSnapshot, p.void = false, true
	}
	if c.lease.synced && !seen[c.cfg.Self] && c.members.started {
		if released[c.cfg.Self] {
			c.fence("the lease was revoked")
		} else {
			c.fence("the lease was deleted")
		}
		return
	}
	for id, p := range c.leases {
		if p.inSnapshot && !seen[id] {
			p.inSnapshot = false
			c.goneNow(p)
		}
	}
	for _, rs := range m.Records {
		c.learnRecord(rs)
	}
	c.seeStale(m.Stale)
}

// staleLease is a lease with no holder as this member has seen it, and
// when its delete was last sent (sent).
type staleLease struct {
	version        string
	seenAt, sentAt time.Duration
	sent           bool
}

// seeStale takes the leases with no holder of a snapshot: a new one, or
// one whose version changed, counts from now; one gone is forgotten.
func (c *Core) seeStale(stale []StaleLease) {
	in := make(map[string]bool, len(stale))
	for _, sl := range stale {
		in[sl.Name] = true
		if st := c.stale[sl.Name]; st == nil || st.version != sl.Version {
			c.stale[sl.Name] = &staleLease{version: sl.Version, seenAt: c.now}
		}
	}
	for name := range c.stale {
		if !in[name] {
			delete(c.stale, name)
		}
	}
}

// deleteStale deletes the leases with no holder seen unchanged for
// StaleAge; a delete that did not land (the lease is still shown) is sent
// again StaleAge later.
func (c *Core) deleteStale() {
	for _, name := range sortedKeys(c.stale) {
		st := c.stale[name]
		if c.now-st.seenAt >= c.cfg.StaleAge && (!st.sent || c.now-st.sentAt >= c.cfg.StaleAge) {
			st.sent, st.sentAt = true, c.now
			c.out.Send(ToLease, &DeleteLease{Name: name, Version: st.version})
		}
	}
}

// leaseOf returns id's lease as this member observed it, a new one if it
// observed none.
func (c *Core) leaseOf(id MemberID) *peerLease {
	p := c.leases[id]
	if p == nil {
		p = &peerLease{}
		c.leases[id] = p
	}
	return p
}

// seeVersion: p's lease is at version v as seen now; a version not seen
// before is live again, and counts from now.
func (c *Core) seeVersion(p *peerLease, v string) {
	if !p.known || p.version != v {
		p.known, p.version, p.seenAt = true, v, c.now
		p.void, p.revoking, p.gone = false, false, false
	}
}

// goneNow: p's lease is deleted, as first seen now (unless known void).
func (c *Core) goneNow(p *peerLease) {
	if !p.void && !p.gone {
		p.gone, p.goneAt = true, c.now
	}
}

func (c *Core) leaseChecked(m *LeaseChecked) {
	p := c.leaseOf(m.Member)
	p.checking = false
	switch {
	case m.Failed:
		// Read again: checkAbsentLeases at its next round, or the next
		// revocation's failure.
	case !m.Found && m.Released:
		p.void = true
	case !m.Found:
		// A tombstone holds its lease's name: its holder never writes it
		// again, but may have had one that someone deleted.
		c.goneNow(p)
	default:
		c.seeVersion(p, m.Version)
	}
}

func (c *Core) leaseRevoked(m *LeaseRevoked) {
	p := c.leases[m.Member]
	if p == nil || p.version != m.Version {
		return
	}
	p.revoking = false
	if m.OK {
		p.void = true
	}
	if !m.OK && !p.checking {
		// The lease changed: renewed, released (another member revoked
		// it), or deleted. Read it again: released makes it void, none
		// (a tombstone takes its name) gone, a new version restarts the
		// wait.
		p.checking = true
		c.out.Send(ToLease, &CheckLease{Member: m.Member})
	}
}

// checkAbsentLeases reads the lease of each record holder this member
// asks that is not a current peer and whose lease it has never seen: if
// there is none, a tombstone takes its name, and the member never calls a
// handler.
func (c *Core) checkAbsentLeases() {
	if c.ticks%c.cfg.HelloTicks != 0 {
		return
	}
	need := map[MemberID]struct{}{}
	for r := range c.ranges {
		if st, ok := c.ranges[r].state.(*acquiring); ok && st.asked != "" {
			need[st.asked] = struct{}{}
		}
	}
	for _, id := range sortedKeys(need) {
		if c.members.isCurrent(id) {
			continue
		}
		if p := c.leases[id]; p != nil && (p.known || p.void || p.checking) {
			continue
		}
		c.leaseOf(id).checking = true
		c.out.Send(ToLease, &CheckLease{Member: id})
	}
}
