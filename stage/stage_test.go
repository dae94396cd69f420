package stage

import "testing"

func TestOutbox(t *testing.T) {
	var o Outbox
	if o.Msgs() != nil {
		t.Fatal("empty outbox returned messages")
	}
	body := &struct{ n int }{1}
	o.Send(ToQueue, body)
	o.Request(ToListener(7), "x")
	got := o.Msgs()
	want := []Msg{{To: Addr{Kind: Queue}, Mode: Send, Body: body}, {To: Addr{Kind: Listener, ID: 7}, Mode: Request, Body: "x"}}
	if len(got) != len(want) {
		t.Fatalf("got %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("message %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	o.Reset()
	if o.Msgs() != nil {
		t.Fatal("Reset left messages")
	}
	if cap(o.msgs) == 0 {
		t.Fatal("Reset dropped the storage")
	}
	if s := Listener.String() + Queue.String() + Kind(99).String() + Request.String() + Send.String(); s != "listenerfifounknownrequestsend" {
		t.Errorf("names: %q", s)
	}
}

// TestKinds: every kind is a stage, an effect or neither, by an explicit
// rule; the block from Ext up is for packages above stage, all effects.
func TestKinds(t *testing.T) {
	stages := map[Kind]bool{Reflector: true, Queue: true, Indexer: true, Listener: true}
	effects := map[Kind]bool{Handler: true, Timer: true, Source: true, Informer: true}
	for i := 0; i < 256; i++ {
		k := Kind(i)
		wantEffect := effects[k] || k >= Ext
		if k.IsStage() != stages[k] || k.IsEffect() != wantEffect {
			t.Errorf("kind %d (%v): stage %v effect %v", i, k, k.IsStage(), k.IsEffect())
		}
		if k.IsStage() && k.IsEffect() {
			t.Errorf("kind %d is both a stage and an effect", i)
		}
	}
	if s := (Ext + 1).String(); s != "ext+1" {
		t.Errorf("Ext+1: %q", s)
	}
	if s := Kind(9).String(); s != "unknown" {
		t.Errorf("Kind(9): %q", s)
	}
	if a := TimerOf(Ext+2, 3); a.Owner() != Ext+2 || a.Kind != Timer {
		t.Errorf("TimerOf(Ext+2, 3) = %+v, owner %v", a, a.Owner())
	}
}
