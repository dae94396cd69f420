package testcluster

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a loopback TCP proxy that can cut its connections on demand or at
// random moments. Put it in front of the apiserver (see Cluster.NewProxy and
// Cluster.ProxyConfig) to make client connections and watches break without
// stopping the server. TLS passes through untouched.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	conns   map[*proxyPair]struct{}
	blocked bool
	closed  bool

	chaosMu   sync.Mutex
	chaosStop chan struct{}
	chaosDone chan struct{}

	wg       sync.WaitGroup
	cuts     atomic.Int64
	accepted atomic.Int64
}

type proxyPair struct {
	client, server net.Conn
	once           sync.Once
}

// cut closes both sides, the client side with a TCP reset (SO_LINGER 0), as
// a broken network would.
func (pp *proxyPair) cut() {
	pp.once.Do(func() {
		if tc, ok := pp.client.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		pp.client.Close()
		pp.server.Close()
	})
}

// NewFlakyProxy starts a proxy on a free 127.0.0.1 port that forwards every
// connection to target (host:port). A t.Cleanup closes it: it stops the
// chaos loop, closes the listener and every connection, and waits for its
// goroutines.
func NewFlakyProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testcluster: proxy listen: %v", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*proxyPair]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.accepted.Add(1)
		p.mu.Lock()
		if p.closed || p.blocked {
			p.mu.Unlock()
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
			continue
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	pp := &proxyPair{client: client, server: server}
	p.mu.Lock()
	if p.closed || p.blocked {
		p.mu.Unlock()
		pp.cut()
		return
	}
	p.conns[pp] = struct{}{}
	p.mu.Unlock()

	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done // either direction ended: end both
	pp.cut()
	<-done

	p.mu.Lock()
	delete(p.conns, pp)
	p.mu.Unlock()
}

// CutAll closes every open connection (clients see a reset) and returns how
// many it closed. New connections are accepted as before.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	pairs := make([]*proxyPair, 0, len(p.conns))
	for pp := range p.conns {
		pairs = append(pairs, pp)
		delete(p.conns, pp)
	}
	p.mu.Unlock()
	for _, pp := range pairs {
		pp.cut()
	}
	p.cuts.Add(int64(len(pairs)))
	return len(pairs)
}

// SetBlocked makes the proxy refuse (accept and reset at once) every new
// connection while b is true, like a server that cannot be reached; when b is
// true it also cuts the open connections.
func (p *Proxy) SetBlocked(b bool) {
	p.mu.Lock()
	p.blocked = b
	p.mu.Unlock()
	if b {
		p.CutAll()
	}
}

// OpenConnections returns the number of connections being forwarded.
func (p *Proxy) OpenConnections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Cuts returns how many connections CutAll (directly or from the chaos loop)
// has closed so far.
func (p *Proxy) Cuts() int64 { return p.cuts.Load() }

// Accepted returns how many connections the proxy has accepted so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// StartChaos starts a loop that calls CutAll after a random pause in
// [minInterval, maxInterval], again and again, until Stop, Close or the end
// of the test. Calling it again replaces the running loop.
func (p *Proxy) StartChaos(minInterval, maxInterval time.Duration) {
	if minInterval <= 0 {
		minInterval = time.Millisecond
	}
	if maxInterval < minInterval {
		maxInterval = minInterval
	}
	p.Stop()
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return
	}
	stop, done := make(chan struct{}), make(chan struct{})
	p.chaosMu.Lock()
	p.chaosStop, p.chaosDone = stop, done
	p.chaosMu.Unlock()
	go func() {
		defer close(done)
		for {
			d := minInterval
			if span := maxInterval - minInterval; span > 0 {
				d += rand.N(span + 1)
			}
			timer := time.NewTimer(d)
			select {
			case <-stop:
				timer.Stop()
				return
			case <-timer.C:
				p.CutAll()
			}
		}
	}()
}

// Stop stops the chaos loop, if running, and waits for it. Connections stay
// as they are.
func (p *Proxy) Stop() {
	p.chaosMu.Lock()
	stop, done := p.chaosStop, p.chaosDone
	p.chaosStop, p.chaosDone = nil, nil
	p.chaosMu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// Close stops the chaos loop, closes the listener and every connection and
// waits for the proxy's goroutines. Safe to call more than once; NewFlakyProxy
// registers it as a t.Cleanup.
func (p *Proxy) Close() {
	p.Stop()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.CutAll()
	p.wg.Wait()
}
