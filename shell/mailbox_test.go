package shell

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/actorinformer/actorinformer/internal/leakcheck"
)

func newMailbox() actor.Mailbox { return &mailbox{} }

// recordingInvoker records what a mailbox hands it, in order.
type recordingInvoker struct {
	mu        sync.Mutex
	sys, user []any
	escalated []any
	onUser    func(msg any)
	onSys     func(msg any)
}

func (r *recordingInvoker) InvokeSystemMessage(msg any) {
	if r.onSys != nil {
		r.onSys(msg)
	}
	r.mu.Lock()
	r.sys = append(r.sys, msg)
	r.mu.Unlock()
}

func (r *recordingInvoker) InvokeUserMessage(msg any) {
	if r.onUser != nil {
		r.onUser(msg)
	}
	r.mu.Lock()
	r.user = append(r.user, msg)
	r.mu.Unlock()
}

func (r *recordingInvoker) EscalateFailure(reason any, msg any) {
	r.mu.Lock()
	r.escalated = append(r.escalated, reason)
	r.mu.Unlock()
}

func (r *recordingInvoker) snapshot() (sys, user, escalated []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.sys...), append([]any(nil), r.user...), append([]any(nil), r.escalated...)
}

// TestMailboxOrder runs the mailbox on the calling goroutine (protoactor's
// synchronized dispatcher): system messages before user messages, each
// queue in order, suspend holding user messages back until resume, a
// panic escalated with the rest of the queue kept, and a ring that grows
// past its first size.
func TestMailboxOrder(t *testing.T) {
	inv := &recordingInvoker{}
	m := newMailbox()
	m.RegisterHandlers(inv, actor.NewSynchronizedDispatcher(300))
	mb := m.(*mailbox)

	// Posted while "running", so that nothing is processed yet.
	mb.status.Store(running)
	for i := range 40 {
		m.PostUserMessage(i)
	}
	m.PostSystemMessage("sys-a")
	m.PostSystemMessage("sys-b")
	if got := m.UserMessageCount(); got != 40 {
		t.Fatalf("UserMessageCount %d, want 40", got)
	}
	mb.status.Store(idle)
	m.PostSystemMessage(&actor.SuspendMailbox{}) // schedules: runs here
	sys, user, _ := inv.snapshot()
	if fmt.Sprint(sys) != "[sys-a sys-b]" || len(user) != 0 {
		t.Fatalf("suspended: system %v, user %v; want both system messages and no user message", sys, user)
	}
	m.PostSystemMessage(&actor.ResumeMailbox{})
	sys, user, _ = inv.snapshot()
	if len(sys) != 2 || len(user) != 40 {
		t.Fatalf("after resume: %d system, %d user messages; want 2 and 40", len(sys), len(user))
	}
	for i, v := range user {
		if v != i {
			t.Fatalf("user message %d is %v: out of order", i, v)
		}
	}
	if got := m.UserMessageCount(); got != 0 {
		t.Fatalf("UserMessageCount %d after the pass, want 0", got)
	}

	inv.onUser = func(msg any) {
		if msg == "boom" {
			panic("boom")
		}
	}
	mb.status.Store(running)
	m.PostUserMessage("boom")
	m.PostUserMessage("after")
	mb.status.Store(idle)
	m.PostSystemMessage("kick") // one pass: the panic ends it
	_, user, esc := inv.snapshot()
	if len(esc) != 1 || esc[0] != "boom" {
		t.Fatalf("escalated %v, want [boom]", esc)
	}
	// protoactor's actor suspends its mailbox when it escalates; this
	// invoker does not, so the pass goes on with the next message.
	if len(user) != 41 || user[40] != "after" || m.UserMessageCount() != 0 {
		t.Fatalf("after the panic: handled %v (%d queued); want the message after it handled", user[40:], m.UserMessageCount())
	}
}

// TestMailboxHandOver: a mailbox whose passes run on the goroutine that
// wakes it (Config.RunOnSender) takes Throughput+1 messages there, then
// hands the rest of the pass, in order, to a new goroutine: the sender's
// Post returns while the pass goes on.
func TestMailboxHandOver(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	release := make(chan struct{})
	inv := &recordingInvoker{onUser: func(msg any) {
		if msg.(int) == 3 {
			<-release // on the new goroutine: the sender must not wait for it
		}
	}}
	m := newHandOverMailbox()
	m.RegisterHandlers(inv, actor.NewSynchronizedDispatcher(2))
	mb := m.(*mailbox)

	mb.status.Store(running) // queue six without processing them
	for i := range 6 {
		m.PostUserMessage(i)
	}
	mb.status.Store(idle)
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		m.PostUserMessage(6) // wakes it: the pass runs here
	}()
	select {
	case <-posted:
	case <-time.After(10 * time.Second):
		t.Fatal("the sender was held by the whole pass, beyond Throughput messages")
	}
	if _, user, _ := inv.snapshot(); fmt.Sprint(user) != "[0 1 2]" {
		t.Fatalf("the sender's part of the pass took %v, want [0 1 2]", user)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, user, _ := inv.snapshot()
		if len(user) == 7 {
			if fmt.Sprint(user) != "[0 1 2 3 4 5 6]" {
				t.Fatalf("took %v, want [0 1 2 3 4 5 6]", user)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the handed-over pass took %v, want all seven", user)
		}
		time.Sleep(time.Millisecond)
	}
	for mb.status.Load() != idle { // the new goroutine ends its pass
		if time.Now().After(deadline) {
			t.Fatal("the handed-over pass did not end")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestMailboxConcurrentPosters: several goroutines post while the mailbox
// runs on protoactor's goroutine dispatcher; every message arrives once, in
// each poster's order, one pass at a time, and no goroutine is left.
// Real time: the dispatcher's goroutines are the subject.
func TestMailboxConcurrentPosters(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	const posters, each = 4, 5000
	var inPass atomic.Int32
	var overlap atomic.Bool
	inv := &recordingInvoker{}
	inv.onUser = func(any) {
		if inPass.Add(1) != 1 {
			overlap.Store(true)
		}
		inPass.Add(-1)
	}
	m := newMailbox()
	m.RegisterHandlers(inv, actor.NewDefaultDispatcher(300))
	var wg sync.WaitGroup
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m.PostUserMessage([2]int{p, i})
				if i%1000 == 0 {
					m.PostSystemMessage(i)
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, user, _ := inv.snapshot()
		if len(user) == posters*each && m.(*mailbox).status.Load() == idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages handled", len(user), posters*each)
		}
		time.Sleep(time.Millisecond)
	}
	if overlap.Load() {
		t.Fatal("two passes handled messages at the same time")
	}
	sys, user, _ := inv.snapshot()
	if len(sys) != posters*each/1000 {
		t.Fatalf("%d system messages, want %d", len(sys), posters*each/1000)
	}
	next := make([]int, posters)
	for _, v := range user {
		pi := v.([2]int)
		if pi[1] != next[pi[0]] {
			t.Fatalf("poster %d: message %d arrived when %d was expected", pi[0], pi[1], next[pi[0]])
		}
		next[pi[0]]++
	}
}

// TestMailboxSchedulesNoAllocation: waking the mailbox from idle allocates
// nothing of its own (protoactor's default allocates a method value per
// wake-up).
func TestMailboxSchedulesNoAllocation(t *testing.T) {
	inv := &recordingInvoker{}
	m := newMailbox()
	m.RegisterHandlers(inv, actor.NewSynchronizedDispatcher(300))
	var msg any = "x"
	// The first posts grow the ring and the record; then measure.
	for range 64 {
		m.PostUserMessage(msg)
	}
	inv.user = make([]any, 0, 1<<16)
	if n := testing.AllocsPerRun(1000, func() { m.PostUserMessage(msg) }); n != 0 {
		t.Fatalf("%v allocations per post and wake-up, want 0", n)
	}
}

// directMailbox returns a mailbox with a Direct, its handlers registered
// with protoactor's default dispatcher (a pass on a new goroutine).
func directMailbox(inv actor.MessageInvoker) (*mailbox, *Direct) {
	d := &Direct{}
	m := &mailbox{direct: d}
	m.RegisterHandlers(inv, actor.NewDefaultDispatcher(throughput))
	return m, d
}

// waitIdle waits until m has no message left and no pass running.
func waitIdle(m *mailbox) {
	for m.status.Load() != idle || m.UserMessageCount() > 0 {
		time.Sleep(time.Millisecond)
	}
}

// waitFor fails t unless ch closes within 10 s.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(what)
	}
}

// A Direct posts nothing before its actor has started; its Post with run
// runs the pass on the caller, without it on another goroutine.
func TestDirectRunsThePassOnTheCaller(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	if (&Direct{}).Post(1, true) {
		t.Fatal("Post took a message before the mailbox was made")
	}
	release := make(chan struct{})
	inv := &recordingInvoker{onUser: func(msg any) {
		if msg == "held" {
			<-release
		}
	}}
	m, d := directMailbox(inv)
	if !d.Post("a", true) {
		t.Fatal("Post refused a message")
	}
	if _, user, _ := inv.snapshot(); fmt.Sprint(user) != "[a]" {
		t.Fatalf("after Post(run): %v taken, want [a]: the pass on the caller", user)
	}
	d.Post("held", false) // would never return if it ran the pass here
	close(release)
	waitIdle(m)
	if _, user, _ := inv.snapshot(); fmt.Sprint(user) != "[a held]" {
		t.Fatalf("taken %v, want [a held]", user)
	}
}

// A system message, or a pass's throughput of messages, hands the rest of
// a Direct's pass to a new goroutine: the caller never runs a stop, which
// may wait for it, nor a long pass; a panic is escalated as in a pass of
// the dispatcher's.
func TestDirectHandsOverSystemMessagesAndLongPasses(t *testing.T) {
	defer goleak.VerifyNone(t, leakcheck.Options()...)
	posted := make(chan struct{})
	var m *mailbox
	inv := &recordingInvoker{}
	inv.onUser = func(msg any) {
		switch msg {
		case "stop":
			m.PostSystemMessage("sys")
			m.PostUserMessage("after")
		case "boom":
			panic("boom")
		case throughput + 10:
			<-posted // runs on the caller only if Post ran the whole pass
		}
	}
	inv.onSys = func(any) { <-posted }
	m, d := directMailbox(inv)
	done := make(chan struct{})
	go func() { defer close(done); d.Post("stop", true) }()
	waitFor(t, done, "Post ran the system message that came during its pass")
	close(posted)
	waitIdle(m)
	sys, user, _ := inv.snapshot()
	if fmt.Sprint(sys) != "[sys]" || fmt.Sprint(user) != "[stop after]" {
		t.Fatalf("system %v, user %v; want [sys] then [stop after]", sys, user)
	}

	posted = make(chan struct{})
	m.status.Store(running) // queued, not yet taken
	for i := range throughput + 20 {
		m.PostUserMessage(i)
	}
	m.status.Store(idle)
	done = make(chan struct{})
	go func() { defer close(done); d.Post("boom", true) }()
	waitFor(t, done, "Post ran more than a pass's throughput of messages")
	close(posted)
	waitIdle(m)
	_, user, escalated := inv.snapshot()
	if len(user) != 2+throughput+20 || fmt.Sprint(escalated) != "[boom]" {
		t.Fatalf("%d messages taken, escalated %v; want %d and [boom]", len(user), escalated, 2+throughput+20)
	}
}
