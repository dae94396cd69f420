package shell

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
	"github.com/actorinformer/actorinformer/stage"
	"github.com/actorinformer/actorinformer/telemetry"
)

// input is the test core's input type: a ping, or its actor's lifecycle.
type input interface{ testInput() }

type ping struct{ n int }

type life stage.Lifecycle

func (*ping) testInput() {}
func (life) testInput()  {}

// scriptCore answers each input with the messages script gives for it,
// and records what it took.
type scriptCore struct {
	mu     sync.Mutex
	took   []input
	script func(in input) []stage.Msg
}

func (c *scriptCore) Step(in input) []stage.Msg {
	c.mu.Lock()
	c.took = append(c.took, in)
	c.mu.Unlock()
	return c.script(in)
}

func (c *scriptCore) taken() []input {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]input(nil), c.took...)
}

// sink is an actor forwarding what it gets to a channel.
type sink chan any

func (s sink) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped:
	default:
		s <- m
	}
}

type envLog struct {
	mu        sync.Mutex
	performed []stage.Msg
	stopped   int
}

func (e *envLog) Perform(_ actor.Context, m stage.Msg) bool {
	if m.To.Kind != stage.Informer {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.performed = append(e.performed, m)
	return true
}

func (e *envLog) Stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopped++
}

func recv(t *testing.T, ch chan any) any {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("nothing delivered")
		return nil
	}
}

// TestShell: the shell tells its core the actor's lifecycle, delivers what
// the core returns in order (to the peers, to its Env, to its timers),
// drops an undeliverable message and a message that is not the core's
// input by the one policy (logged, counted), leaves protoactor's
// DeadLetterResponse alone, and carries on over the same core after a
// restart, with a new Env and its timers stopped.
func TestShell(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	var logs bytes.Buffer
	var logMu sync.Mutex
	tel := telemetry.New(telemetry.Config{Logger: slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, nil))})
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	queue := make(sink, 10)
	qpid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return queue }))
	timer := stage.TimerOf(stage.Indexer, 0)
	core := &scriptCore{script: func(in input) []stage.Msg {
		switch m := in.(type) {
		case *ping:
			switch m.n {
			case 1:
				// The timer first: once "b" arrives, it is set.
				return []stage.Msg{
					{To: timer, Body: &stage.SetTimer{After: time.Minute, Fire: &ping{n: 2}}},
					{To: stage.ToQueue, Body: "a"},
					{To: stage.ToInformer, Body: "report"},
					{To: stage.ToListener(9), Body: "nobody"},
					{To: stage.ToQueue, Mode: stage.Request, Body: "b"},
				}
			case 2:
				return []stage.Msg{{To: stage.ToQueue, Body: "fired"}}
			case 3:
				panic("a bug")
			case 4:
				return []stage.Msg{{To: stage.ToQueue, Body: "barrier"}}
			}
		}
		return nil
	}}
	var envs []*envLog
	var envMu sync.Mutex
	peers := &Peers{}
	peers.Set(stage.ToQueue, qpid)
	var routed []input
	pid := sys.Root.Spawn(Props(Config[input]{
		Stage: stage.Indexer, Core: core, Peers: peers, Clock: clk, Telemetry: tel,
		Lifecycle: func(l stage.Lifecycle) input { return life(l) },
		Env: func(actor.Context) Env {
			envMu.Lock()
			defer envMu.Unlock()
			envs = append(envs, &envLog{})
			return envs[len(envs)-1]
		},
		Route: func(in input) { routed = append(routed, in) },
	}))
	sys.Root.Send(pid, "stray")                     // not an input: dropped
	sys.Root.Send(pid, &actor.DeadLetterResponse{}) // protoactor's: ignored
	sys.Root.Send(pid, &ping{n: 1})
	if m := recv(t, queue); m != "a" {
		t.Fatalf("first to the queue: %v", m)
	}
	if m := recv(t, queue); m != "b" {
		t.Fatalf("second to the queue: %v", m)
	}
	clk.Step(time.Minute)
	if m := recv(t, queue); m != "fired" {
		t.Fatalf("after the timer: %v", m)
	}
	// A restart: Restarting, the Env stopped, a new Env, Started; the
	// timer set before is stopped.
	sys.Root.Send(pid, &ping{n: 1}) // sets the timer again
	recv(t, queue)
	recv(t, queue)
	sys.Root.Send(pid, &ping{n: 3})
	sys.Root.Send(pid, &ping{n: 4}) // a barrier: taken after the restart
	if m := recv(t, queue); m != "barrier" {
		t.Fatalf("after the restart: %v", m)
	}
	clk.Step(time.Minute)
	if err := sys.Root.PoisonFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, m := range core.taken() {
		switch m.(type) {
		case *ping:
			kinds = append(kinds, "ping")
		case life:
			kinds = append(kinds, stage.Lifecycle(m.(life)).String())
		}
	}
	want := "started ping ping ping ping restarting started ping stopping"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("the core took %s, want %s", got, want)
	}
	select {
	case m := <-queue:
		t.Fatalf("delivered after the restart stopped the timer: %v", m)
	default:
	}
	envMu.Lock()
	defer envMu.Unlock()
	if len(envs) != 2 || envs[0].stopped != 1 || envs[1].stopped != 1 || len(envs[0].performed) != 2 || envs[0].performed[0].Body != "report" {
		t.Fatalf("envs: %d, first stopped %d performed %v", len(envs), envs[0].stopped, envs[0].performed)
	}
	if len(routed) != 5 {
		t.Fatalf("routed %d messages, want the 5 pings", len(routed))
	}
	logMu.Lock()
	defer logMu.Unlock()
	l := logs.String()
	if strings.Count(l, "undeliverable message dropped") != 2 || !strings.Contains(l, "to=listener") || !strings.Contains(l, "id=9") || !strings.Contains(l, "type=string") {
		t.Fatalf("logged %q, want the undeliverable message to listener 9 twice", l)
	}
	if strings.Count(l, "unexpected message dropped") != 1 || !strings.Contains(l, "type=string") || strings.Contains(l, "DeadLetterResponse") {
		t.Fatalf("logged %q, want the stray string once as unexpected, and no DeadLetterResponse", l)
	}
	if n := tel.Metrics.Counters.Dropped.Load(); n != 3 {
		t.Fatalf("%d drops counted, want 3", n)
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestPeers: stage addresses map to mailboxes; effects and unknown
// addresses have none.
func TestPeers(t *testing.T) {
	var p Peers
	a, b := &actor.PID{Id: "a"}, &actor.PID{Id: "b"}
	p.Set(stage.ToQueue, a)
	p.Set(stage.ToListener(3), b)
	if p.Get(stage.ToQueue) != a || p.Get(stage.ToListener(3)) != b || p.Get(stage.ToListener(4)) != nil || p.Get(stage.ToIndexer) != nil || p.Get(stage.ToHandler(3)) != nil {
		t.Fatal("lookups")
	}
	p.Set(stage.ToListener(3), nil)
	if p.Get(stage.ToListener(3)) != nil {
		t.Fatal("listener not removed")
	}
}

// extEnv performs the effects of kind stage.Ext+1 that a core defined
// above package stage sends.
type extEnv struct{ got chan any }

func (e extEnv) Perform(_ actor.Context, m stage.Msg) bool {
	if m.To.Kind != stage.Ext+1 {
		return false
	}
	e.got <- m.Body
	return true
}

// TestShell_aboveStage: a core of a package above stage, with an input
// type of its own, runs in the shell as a kind of the reserved block: its
// effects of that block go to its Env, its timers are its own, and a core
// that does not ask for the lifecycle is not told of it.
func TestShell_aboveStage(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	const self = stage.Ext
	timer := stage.TimerOf(self, 0)
	core := &scriptCore{script: func(in input) []stage.Msg {
		switch m := in.(type) {
		case *ping:
			if m.n == 1 {
				return []stage.Msg{{To: timer, Body: &stage.SetTimer{After: time.Second, Fire: &ping{n: 2}}}}
			}
			return []stage.Msg{{To: stage.Addr{Kind: stage.Ext + 1, ID: 7}, Body: m.n}}
		}
		return nil
	}}
	env := extEnv{got: make(chan any, 1)}
	pid := sys.Root.Spawn(Props(Config[input]{Stage: self, Core: core, Clock: clk,
		Env: func(actor.Context) Env { return env }}))
	sys.Root.Send(pid, &ping{n: 1})
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(time.Second)
	select {
	case got := <-env.got:
		if got != 2 {
			t.Fatalf("the effect carried %v, want the timer's ping 2", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the effect was not performed")
	}
	if err := sys.Root.PoisonFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	for _, in := range core.taken() {
		if _, ok := in.(life); ok {
			t.Fatalf("the core was told %v without a Config.Lifecycle", in)
		}
	}
}

// TestShell_runOnSender: with Config.RunOnSender, a message posted to the
// idle actor is taken on the sender's goroutine, before its Send returns;
// one posted while a pass runs on another goroutine joins that pass, and
// its Send returns at once.
func TestShell_runOnSender(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	entered, release := make(chan struct{}), make(chan struct{})
	core := &scriptCore{script: func(in input) []stage.Msg {
		if p, ok := in.(*ping); ok && p.n == 1 {
			close(entered)
			<-release
		}
		return nil
	}}
	pid := sys.Root.Spawn(Props(Config[input]{Stage: stage.Queue, Core: core, RunOnSender: true}))
	pings := func() string {
		var ns []int
		for _, in := range core.taken() {
			if p, ok := in.(*ping); ok {
				ns = append(ns, p.n)
			}
		}
		return fmt.Sprint(ns)
	}

	sys.Root.Send(pid, &ping{n: 0})
	if got := pings(); got != "[0]" {
		t.Fatalf("after the Send to the idle actor, the core took %s, want [0]", got)
	}
	first := make(chan struct{})
	go func() {
		defer close(first)
		sys.Root.Send(pid, &ping{n: 1}) // runs the pass, which blocks in ping 1
	}()
	<-entered
	sys.Root.Send(pid, &ping{n: 2}) // the actor is busy: only queued
	if got := pings(); got != "[0 1]" {
		t.Fatalf("while ping 1 is being taken, the core took %s, want [0 1]", got)
	}
	close(release)
	<-first
	if got := pings(); got != "[0 1 2]" {
		t.Fatalf("once the first sender's Send returned, the core took %s, want [0 1 2]", got)
	}
	if err := sys.Root.PoisonFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
}

// TestShell_growStack: a pass of an actor with Config.GrowStack begins
// with a stack of passStack: a frame of half of it (more than a new
// goroutine's stack holds) does not make the runtime grow the stack, and
// so move it with the address of a local variable; without GrowStack, the
// same frame moves it.
func TestShell_growStack(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	for _, grow := range []bool{true, false} {
		t.Run(fmt.Sprintf("GrowStack=%v", grow), func(t *testing.T) {
			sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
			defer sys.Shutdown()
			moved := make(chan bool, 1)
			core := &scriptCore{script: func(in input) []stage.Msg {
				if _, ok := in.(*ping); ok {
					var local byte
					before := uintptr(unsafe.Pointer(&local))
					halfPassStack(0)
					moved <- uintptr(unsafe.Pointer(&local)) != before
				}
				return nil
			}}
			pid := sys.Root.Spawn(Props(Config[input]{Stage: stage.Reflector, Core: core, GrowStack: grow}))
			sys.Root.Send(pid, &ping{})
			select {
			case m := <-moved:
				if m == grow {
					t.Fatalf("GrowStack %v: the frame of half passStack moved the stack: %v, want %v", grow, m, !grow)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the ping was not taken")
			}
			if err := sys.Root.PoisonFuture(pid).Wait(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// halfPassStack has a frame of half passStack.
//
//go:noinline
func halfPassStack(i int) byte {
	var frame [passStack / 2]byte
	frame[i] = 1
	return frame[i+1]
}

// countCore counts its inputs and closes done at the n-th.
type countCore struct {
	n, want int
	done    chan struct{}
}

func (c *countCore) Step(input) []stage.Msg {
	if c.n++; c.n == c.want {
		close(c.done)
	}
	return nil
}

// BenchmarkShellSend: one message sent to a stage's actor and taken by its
// core, per op: what the pipeline pays for a message between two stages
// (the enqueue, the mailbox's wake-up, the type assertion, the Step). The
// contract's exceptions (package stage) weigh shared reads against it.
func BenchmarkShellSend(b *testing.B) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	defer sys.Shutdown()
	core := &countCore{want: b.N, done: make(chan struct{})}
	pid := sys.Root.Spawn(Props(Config[input]{Stage: stage.Indexer, Core: core}))
	msg := &ping{}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		sys.Root.Send(pid, msg)
	}
	<-core.done
	b.StopTimer()
	_ = sys.Root.PoisonFuture(pid).Wait()
}
