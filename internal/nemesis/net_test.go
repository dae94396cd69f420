package nemesis

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
)

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

// dialFrom connects to addr from the local address src.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends a line and waits up to wait for it to come back.
func roundTrip(c net.Conn, wait time.Duration) error {
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return errors.New("got " + line)
	}
	return nil
}

func timeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestNetCuts(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, leakcheck.Options()...) })
	target := echo(t)
	n := NewNet()
	n.Source("127.0.1.1", "a")
	n.Source("127.0.1.3", "c")
	link, err := n.MemberLink("b", target)
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	fromA := dialFrom(t, "127.0.1.1", link.Addr())
	fromC := dialFrom(t, "127.0.1.3", link.Addr())
	for _, c := range []net.Conn{fromA, fromC} {
		if err := roundTrip(c, time.Second); err != nil {
			t.Fatalf("before any cut: %v", err)
		}
	}

	// Drop between a and b: a's bytes are held, c's flow; a new
	// connection from a is held too. Healing delivers what was held.
	n.Cut(Drop, "b", "a")
	if err := roundTrip(fromA, 200*time.Millisecond); !timeout(err) {
		t.Fatalf("a through a drop: %v, want a timeout", err)
	}
	if err := roundTrip(fromC, time.Second); err != nil {
		t.Fatalf("c while a is cut: %v", err)
	}
	later := dialFrom(t, "127.0.1.1", link.Addr())
	if err := roundTrip(later, 200*time.Millisecond); !timeout(err) {
		t.Fatalf("a new connection from a through a drop: %v, want a timeout", err)
	}
	n.Heal("a")
	for _, c := range []net.Conn{fromA, later} {
		// The held ping arrives first, then this one.
		if _, err := c.Write([]byte("pong\n")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		br := bufio.NewReader(c)
		for _, want := range []string{"ping\n", "pong\n"} {
			if line, err := br.ReadString('\n'); err != nil || line != want {
				t.Fatalf("after the heal: %q, %v; want %q", line, err, want)
			}
		}
		_ = c.SetReadDeadline(time.Time{})
	}

	// Reject: a's connection is reset, a new one too; c's still flows.
	n.Cut(Reject, "a", "b")
	if err := roundTrip(fromA, time.Second); err == nil || timeout(err) {
		t.Fatalf("a through a reject: %v, want a reset", err)
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.1.1")}, Timeout: time.Second}
	if c, err := d.Dial("tcp", link.Addr()); err == nil { // the reset may come before connect returns
		err = roundTrip(c, time.Second)
		c.Close()
		if err == nil || timeout(err) {
			t.Fatalf("a new connection through a reject: %v, want a reset", err)
		}
	}
	if err := roundTrip(fromC, time.Second); err != nil {
		t.Fatalf("c while a is rejected: %v", err)
	}
	n.Heal("a")
	if err := roundTrip(dialFrom(t, "127.0.1.1", link.Addr()), time.Second); err != nil {
		t.Fatalf("a after the heal: %v", err)
	}

	// Isolation cuts a from every member, one known only later included,
	// not from etcd (below).
	n.Isolate(Drop, "a")
	if err := roundTrip(dialFrom(t, "127.0.1.1", link.Addr()), 200*time.Millisecond); !timeout(err) {
		t.Fatalf("isolated a to b: %v, want a timeout", err)
	}
	n.Source("127.0.1.4", "d")
	linkA, err := n.MemberLink("a", target)
	if err != nil {
		t.Fatal(err)
	}
	defer linkA.Close()
	if err := roundTrip(dialFrom(t, "127.0.1.4", linkA.Addr()), 200*time.Millisecond); !timeout(err) {
		t.Fatalf("d to isolated a: %v, want a timeout", err)
	}
	if err := roundTrip(dialFrom(t, "127.0.1.4", link.Addr()), time.Second); err != nil {
		t.Fatalf("d to b while a is isolated: %v", err)
	}
	n.Heal("a")

	// An etcd link belongs to one member.
	etcd, err := n.EtcdLink("a", target)
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	toEtcd := dialFrom(t, "127.0.0.1", etcd.Addr())
	n.Isolate(Reject, "a")
	if err := roundTrip(toEtcd, time.Second); err != nil {
		t.Fatalf("isolated a to etcd: %v", err)
	}
	n.Heal("a")
	n.Cut(Drop, "a", EtcdEndpoint)
	if err := roundTrip(toEtcd, 200*time.Millisecond); !timeout(err) {
		t.Fatalf("a to etcd through a drop: %v, want a timeout", err)
	}
	if err := roundTrip(dialFrom(t, "127.0.1.1", link.Addr()), time.Second); err != nil {
		t.Fatalf("a to b while a is cut from etcd: %v", err)
	}
	n.Heal("a")
	if err := roundTrip(toEtcd, time.Second); err != nil {
		t.Fatalf("a to etcd after the heal: %v", err)
	}
}

// A muted member's bytes to the others are held, one way: what the others
// send it arrives (its echo's answers are held), and it still reaches
// etcd. Healing delivers what was held.
func TestNetMute(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t, leakcheck.Options()...) })
	n := NewNet()
	n.Source("127.0.1.1", "a")
	n.Source("127.0.1.3", "c")
	// b's endpoint echoes; a's endpoint records what arrives and echoes.
	linkB, err := n.MemberLink("b", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer linkB.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			got <- line
			if _, err := c.Write([]byte(line)); err != nil {
				return
			}
		}
	}()
	defer func() { ln.Close(); <-served }()
	linkA, err := n.MemberLink("a", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer linkA.Close()
	etcd, err := n.EtcdLink("a", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	aToB := dialFrom(t, "127.0.1.1", linkB.Addr())
	cToA := dialFrom(t, "127.0.1.3", linkA.Addr())
	toEtcd := dialFrom(t, "127.0.0.1", etcd.Addr())
	if err := roundTrip(aToB, time.Second); err != nil {
		t.Fatalf("before the mute: %v", err)
	}

	n.Mute("a")
	if err := roundTrip(aToB, 200*time.Millisecond); !timeout(err) {
		t.Fatalf("a to b while a is muted: %v, want a timeout", err)
	}
	if err := roundTrip(cToA, 200*time.Millisecond); !timeout(err) {
		t.Fatalf("c to a and back while a is muted: %v, want a timeout (a's answer held)", err)
	}
	select {
	case line := <-got:
		if line != "ping\n" {
			t.Fatalf("a got %q", line)
		}
	case <-time.After(time.Second):
		t.Fatal("c's bytes did not reach the muted a")
	}
	if err := roundTrip(toEtcd, time.Second); err != nil {
		t.Fatalf("muted a to etcd: %v", err)
	}
	if err := roundTrip(dialFrom(t, "127.0.1.3", linkB.Addr()), time.Second); err != nil {
		t.Fatalf("c to b while a is muted: %v", err)
	}

	n.Heal("a")
	for _, c := range []net.Conn{aToB, cToA} {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "ping\n" {
			t.Fatalf("after the heal: %q, %v; want the held answer", line, err)
		}
		_ = c.SetReadDeadline(time.Time{})
	}
}
