package nemesis

import (
	"slices"
	"strings"
	"testing"
)

// Lines as a member writes them (klog, through shard's default logger).
const memberLog = `I1130 16:51:04.296000    4930 member.go:90] "joined" group="g" member="m#1"
W1130 16:51:04.296228    4930 rangeinf.go:145] "fenced: no handler is called from now on" group="g" member="m#1" reason="the lease was deleted and created again (version 12 seen, the create wrote 40)" leftOut=false
W1130 16:51:05.000000    4930 rangeinf.go:145] "fenced: no handler is called from now on" group="g" member="m#2" reason="member \"n#1\" has left this one out of its view for 9 ticks" leftOut=true
W1130 16:51:06.000000    4930 rangeinf.go:145] "fenced: no handler is called from now on" group="g" member="m#3" reason="the lease was not renewed within 3s (last successful write started at 1.2s, now 4.5s)" leftOut=false
W1130 16:51:07.000000    4930 rangeinf.go:145] "fenced: no handler is called from now on" group="g" member="m#4" reason="unterminated
W1130 16:51:08.000000    4930 listwatch.go:10] "the lease was deleted" group="g"
`

func TestFenceReasons(t *testing.T) {
	got := FenceReasons(memberLog)
	want := []string{
		"the lease was deleted and created again",
		"a member has left this one out of its view for N ticks",
		"the lease was not renewed within Ns",
		"(unreadable)",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestCheckCountsFences(t *testing.T) {
	in := Input{Ranges: 1, Procs: []Proc{
		{Name: "m1", Fences: FenceReasons(memberLog)},
		{Name: "m2", Fences: []string{"the lease was not renewed within Ns"}},
		{Name: "m3"},
	}}
	res := Check(in)
	if res.Fences["the lease was not renewed within Ns"] != 2 || res.Fences["the lease was deleted and created again"] != 1 || len(res.Fences) != 4 {
		t.Fatalf("fences %v", res.Fences)
	}
	line := "fences, from the members' logs: 2 × the lease was not renewed within Ns; 1 × (unreadable); 1 × a member has left this one out of its view for N ticks; 1 × the lease was deleted and created again\n"
	if tab := res.Table(); !strings.Contains(tab, line) {
		t.Fatalf("the report has no line %q:\n%s", line, tab)
	}
	if res := Check(Input{Ranges: 1, Procs: []Proc{{Name: "m3"}}}); res.Fences != nil || strings.Contains(res.Table(), "fences") {
		t.Fatalf("fences reported with none logged: %v", res.Fences)
	}
}
