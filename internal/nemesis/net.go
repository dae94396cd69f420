package nemesis

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a cut between two endpoints does to their connections.
type Mode int

const (
	// Open: bytes flow.
	Open Mode = iota
	// Drop: no byte flows either way, and the connections stay open, as
	// over a network that loses every packet: TCP would retransmit, and
	// what was sent arrives once the cut heals. A new connection is
	// accepted and held unanswered until then.
	Drop
	// Reject: open connections are reset and new ones refused, as by a
	// firewall that rejects.
	Reject
)

func (m Mode) String() string {
	switch m {
	case Open:
		return "open"
	case Drop:
		return "drop"
	case Reject:
		return "reject"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// EtcdEndpoint names etcd in cuts: Cut(Drop, "m2", EtcdEndpoint) cuts
// member m2 from etcd; APIEndpoint names the API server.
const (
	EtcdEndpoint = "etcd"
	APIEndpoint  = "apiserver"
)

type pair struct{ from, to string }

// Net is the loopback network of a nemesis run: a Link (a TCP proxy) in
// front of each member's protoactor remote port and one in front of etcd
// for each member, and the cuts between endpoints. A member reaches
// another only through the other's link, and its connections leave from a
// loopback address of its own, so a link knows who calls; a member reaches
// etcd only through its own etcd link.
type Net struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at every change of cuts
	sources  map[string]string
	cuts     map[pair]Mode
	isolated map[string]Mode
	// muted: the members whose bytes to the other members are held (Drop,
	// one way).
	muted map[string]bool
	// deaf: the members whose links refuse every connection (no one can
	// dial their advertised address); their own connections go out.
	deaf  map[string]bool
	links map[*Link]struct{}

	// held counts the chunks a Drop held, reset the connections a Reject
	// reset or refused.
	held, reset atomic.Int64
}

// Counts returns how many chunks of bytes Drop cuts have held and how many
// connections Reject cuts have reset or refused so far.
func (n *Net) Counts() (held, reset int64) { return n.held.Load(), n.reset.Load() }

// NewNet returns a network with no cut.
func NewNet() *Net {
	return &Net{changed: make(chan struct{}), sources: map[string]string{}, cuts: map[pair]Mode{}, isolated: map[string]Mode{},
		muted: map[string]bool{}, deaf: map[string]bool{}, links: map[*Link]struct{}{}}
}

// Source declares that connections from ip are member's.
func (n *Net) Source(ip, member string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sources[ip] = member
}

// Cut cuts a from each of others, both ways, with mode (Drop or Reject).
func (n *Net) Cut(mode Mode, a string, others ...string) {
	n.mu.Lock()
	for _, b := range others {
		if b == a {
			continue
		}
		n.cuts[pair{a, b}] = mode
		n.cuts[pair{b, a}] = mode
	}
	n.changedLocked()
	links := n.linksLocked()
	n.mu.Unlock()
	if mode == Reject {
		for _, l := range links {
			l.resetCut()
		}
	}
}

// Isolate cuts a from every other member, both ways, with mode (Drop or
// Reject), members that join later included; not from etcd nor the API
// server.
func (n *Net) Isolate(mode Mode, a string) {
	n.mu.Lock()
	n.isolated[a] = mode
	n.changedLocked()
	links := n.linksLocked()
	n.mu.Unlock()
	if mode == Reject {
		for _, l := range links {
			l.resetCut()
		}
	}
}

// Mute holds every byte a sends to the other members (as Drop does),
// members that join later included, one way: a still hears them, and
// reaches etcd and the API server. What it sent arrives once healed.
func (n *Net) Mute(a string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.muted[a] = true
	n.changedLocked()
}

// Deafen makes a's link refuse every connection, and reset those it has:
// no member can dial a's advertised address, as if it advertised one that
// no one can reach; a's own connections to the others go out as before.
func (n *Net) Deafen(a string) {
	n.mu.Lock()
	n.deaf[a] = true
	n.changedLocked()
	links := n.linksLocked()
	n.mu.Unlock()
	for _, l := range links {
		l.resetCut()
	}
}

func (n *Net) isDeaf(a string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.deaf[a]
}

// Heal removes every cut that involves a, and its isolation.
func (n *Net) Heal(a string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for p := range n.cuts {
		if p.from == a || p.to == a {
			delete(n.cuts, p)
		}
	}
	delete(n.isolated, a)
	delete(n.muted, a)
	delete(n.deaf, a)
	n.changedLocked()
}

func (n *Net) changedLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

func (n *Net) linksLocked() []*Link {
	out := make([]*Link, 0, len(n.links))
	for l := range n.links {
		out = append(out, l)
	}
	return out
}

// mode returns the cut on the bytes from from to to, and a channel closed
// at the next change.
func (n *Net) mode(from, to string) (Mode, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.cuts[pair{from, to}]
	if from != to && from != "" && to != "" && !infra(from) && !infra(to) {
		m = max(m, n.isolated[from], n.isolated[to])
		if n.muted[from] {
			m = max(m, Drop)
		}
	}
	return m, n.changed
}

// infra: etcd or the API server, not a member.
func infra(e string) bool { return e == EtcdEndpoint || e == APIEndpoint }

func (n *Net) source(addr net.Addr) string {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sources[ta.IP.String()]
}

// waitOpen blocks while from and to are cut with Drop; it reports false
// if they are cut with Reject or done is closed first.
func (n *Net) waitOpen(from, to string, done <-chan struct{}) bool {
	for waited := false; ; {
		m, changed := n.mode(from, to)
		switch m {
		case Open:
			return true
		case Reject:
			n.reset.Add(1)
			return false
		}
		if !waited {
			waited = true
			n.held.Add(1)
		}
		select {
		case <-changed:
		case <-done:
			return false
		}
	}
}

// Link is a TCP proxy in front of one endpoint (a member's remote port, or
// etcd for one member).
type Link struct {
	net    *Net
	ln     net.Listener
	target string
	// to is the endpoint behind the link; from, if set, is the only
	// endpoint that uses it (an etcd link); otherwise the caller is found
	// by its source address.
	to, from string

	mu     sync.Mutex
	conns  map[*linkConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

type linkConn struct {
	from, to string
	client   net.Conn
	done     chan struct{} // closed by cut

	mu     sync.Mutex
	server net.Conn
	isCut  bool
}

// cut closes both sides, the client's with a reset.
func (c *linkConn) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isCut {
		return
	}
	c.isCut = true
	close(c.done)
	if tc, ok := c.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.client.Close()
	if c.server != nil {
		c.server.Close()
	}
}

// setServer attaches the connection to the endpoint; false if the
// connection was cut meanwhile (server is closed then).
func (c *linkConn) setServer(server net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isCut {
		server.Close()
		return false
	}
	c.server = server
	return true
}

// MemberLink starts a link on a free loopback port in front of member's
// remote port (target).
func (n *Net) MemberLink(member, target string) (*Link, error) {
	return n.link(target, member, "")
}

// EtcdLink starts a link on a free loopback port in front of etcd
// (target) for member.
func (n *Net) EtcdLink(member, target string) (*Link, error) {
	return n.link(target, EtcdEndpoint, member)
}

// APILink starts a link on a free loopback port in front of the API
// server (target) for member. TLS passes through.
func (n *Net) APILink(member, target string) (*Link, error) {
	return n.link(target, APIEndpoint, member)
}

func (n *Net) link(target, to, from string) (*Link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &Link{net: n, ln: ln, target: target, to: to, from: from, conns: map[*linkConn]struct{}{}}
	n.mu.Lock()
	n.links[l] = struct{}{}
	n.mu.Unlock()
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr is the link's host:port.
func (l *Link) Addr() string { return l.ln.Addr().String() }

func (l *Link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		from := l.from
		if from == "" {
			from = l.net.source(c.RemoteAddr())
		}
		lc := &linkConn{from: from, to: l.to, client: c, done: make(chan struct{})}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			lc.cut()
			continue
		}
		l.conns[lc] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go l.serve(lc)
	}
}

func (l *Link) serve(c *linkConn) {
	defer l.wg.Done()
	defer func() {
		c.cut()
		l.mu.Lock()
		delete(l.conns, c)
		l.mu.Unlock()
	}()
	// A connection made during a Drop cut waits, unanswered, for the cut
	// to heal; one made during a Reject cut, or to a deaf member, is reset.
	if l.refuses() {
		l.net.reset.Add(1)
		return
	}
	if !l.net.waitOpen(c.from, c.to, c.done) {
		return
	}
	server, err := net.DialTimeout("tcp", l.target, 5*time.Second)
	if err != nil {
		return
	}
	if !c.setServer(server) {
		return
	}
	ended := make(chan struct{}, 2)
	go func() { l.pipe(c, server, c.client, c.from, c.to); ended <- struct{}{} }()
	go func() { l.pipe(c, c.client, server, c.to, c.from); ended <- struct{}{} }()
	<-ended
	c.cut()
	<-ended
}

// pipe copies src to dst, the bytes from one endpoint to another,
// holding every chunk while a Drop cut on them lasts.
func (l *Link) pipe(c *linkConn, dst, src net.Conn, from, to string) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !l.net.waitOpen(from, to, c.done) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: serve ends both sides
		}
	}
}

// refuses: the link is a deaf member's (Deafen).
func (l *Link) refuses() bool { return l.from == "" && l.net.isDeaf(l.to) }

// resetCut resets the connections that a Reject cut, or deafness, now
// covers.
func (l *Link) resetCut() {
	deaf := l.refuses()
	l.mu.Lock()
	var cut []*linkConn
	for c := range l.conns {
		if m, _ := l.net.mode(c.from, c.to); m == Reject || deaf {
			cut = append(cut, c)
		}
	}
	l.mu.Unlock()
	for _, c := range cut {
		c.cut()
	}
	l.net.reset.Add(int64(len(cut)))
}

// Close closes the listener and every connection and waits for the
// link's goroutines.
func (l *Link) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	conns := make([]*linkConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	_ = l.ln.Close()
	for _, c := range conns {
		c.cut()
	}
	l.wg.Wait()
	l.net.mu.Lock()
	delete(l.net.links, l)
	l.net.mu.Unlock()
}
