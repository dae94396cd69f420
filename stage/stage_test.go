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
