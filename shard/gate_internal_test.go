package shard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/actors"
)

// A call that passed the gate while another range's call held the
// registration's lock passes it again once it has the lock: a claim that
// lapsed meanwhile (the process paused while the other call ran) stops it.
func TestGateCheckedAgainUnderTheLock(t *testing.T) {
	s := &Informer{shared: &shared{clock0: time.Now()}}
	s.validUntil.Store(int64(time.Hour))
	reg := &registration{s: s}
	riA, riB := &rangeInformer{r: Range{Index: 0}}, &rangeInformer{r: Range{Index: 1}}
	riA.delivering.Store(true)
	riB.delivering.Store(true)
	inA, release := make(chan struct{}), make(chan struct{})
	var calledB atomic.Bool
	hA := &rangeHandler{reg: reg, ri: riA, inner: actors.ContextEventHandlerFuncs{AddFunc: func(context.Context, any, bool) {
		close(inA)
		<-release
	}}}
	hB := &rangeHandler{reg: reg, ri: riB, inner: actors.ContextEventHandlerFuncs{AddFunc: func(context.Context, any, bool) {
		calledB.Store(true)
	}}}
	doneA, doneB := make(chan struct{}), make(chan struct{})
	go func() { defer close(doneA); hA.OnAdd(context.Background(), "a", false) }()
	<-inA
	// B passes the gate (the claim is valid) and waits for A's lock.
	go func() { defer close(doneB); hB.OnAdd(context.Background(), "b", false) }()
	time.Sleep(50 * time.Millisecond)
	// The claim lapses while B waits; A's call ends.
	s.validUntil.Store(0)
	close(release)
	<-doneA
	time.Sleep(50 * time.Millisecond)
	// The member is fenced: range B is no longer delivered.
	riB.stopDelivering()
	<-doneB
	if calledB.Load() {
		t.Fatal("B's handler was called after the claim lapsed")
	}
	if n := reg.refused.Load(); n != 1 {
		t.Fatalf("%d calls refused, want B's", n)
	}
}
