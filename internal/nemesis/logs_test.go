package nemesis

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
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

// Event lines as shard logs them, with a fence and lines that only mention
// an event's message.
const eventLog = `I1201 11:01:04.296000    4930 rangeinf.go:372] "acquired range" group="g" member="m#1" range="3/16" from="n#1"
I1201 11:01:04.300000    4930 rangeinf.go:372] "acquired range" group="g" member="m#1" range="4/16" from="n#1"
I1201 11:01:05.000000    4930 rangeinf.go:476] "released range" group="g" member="m#1" range="3/16" to="k#1"
I1201 11:01:06.000000    4930 member.go:629] "revoked the lease of a member that stopped renewing it" group="g" member="m#1" of="n#1" version="12"
W1201 11:01:07.000000    4930 rangeinf.go:145] "fenced: no handler is called from now on" group="g" member="m#1" reason="the lease was not renewed within 3s"
I1201 11:01:08.000000    4930 main.go:10] "the test says acquired range" group="g"
I1201 11:01:09.000000    4930 main.go:11] "state" last="released range"
`

func TestLogEvents(t *testing.T) {
	events := LogEvents(eventLog, 2026)
	want := map[string]int{"acquisitions": 2, "releases": 1, "revokes": 1, "fences": 1}
	if got := countEvents(events); !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	at := time.Date(2026, 12, 1, 11, 1, 6, 0, time.Local).UnixNano()
	if events[3].Name != "revokes" || events[3].At != at {
		t.Fatalf("the revoke: %+v, want at %d", events[3], at)
	}
	for _, e := range Events {
		line := `I1201 11:01:04.296000    4930 x.go:1] "` + e.Message + `" group="g"` + "\n"
		if got := LogEvents(line, 2026); len(got) != 1 || got[0].Name != e.Name {
			t.Errorf("%q read as %v", e.Message, got)
		}
	}
	if got := LogEvents(`garbled] "released range"`+"\n", 2026); len(got) != 1 || got[0].At != 0 || got[0].Range != -1 {
		t.Errorf("a line with no time: %+v", got)
	}
	line := `W1201 11:01:04.296000    4930 x.go:1] "` + Events[len(Events)-1].Message + `" group="g" range="3/16" position=5`
	if got := LogEvents(line+"\n", 2026); len(got) != 1 || got[0].Name != EventResumeCutShort || got[0].Range != 3 {
		t.Errorf("a cut-short resume of range 3: %+v", got)
	}

	// Each event counts for the fault begun last before it.
	fault := Fault{Kind: Pause, Target: "m2", Start: time.Date(2026, 12, 1, 11, 1, 5, 0, time.Local).UnixNano()}
	fault.End = fault.Start
	res := Check(Input{Ranges: 1, Faults: []Fault{fault}, Procs: []Proc{{Name: "m1", Events: events},
		{Name: "m2", Events: []Event{{"releases", fault.Start, -1}, {"releases", fault.Start + 1, -1}, {"warm starts", 0, -1}}}}})
	tab := res.Table()
	for _, line := range []string{
		"the members' logs record: 2 acquisitions, 3 releases, 1 revokes, 1 warm starts, 1 fences\n",
		"from each fault's start to the next's, by kind: before any fault: 2 acquisitions, 1 warm starts; pause: 3 releases, 1 revokes, 1 fences\n",
	} {
		if !strings.Contains(tab, line) {
			t.Fatalf("the report has no line %q:\n%s", line, tab)
		}
	}
	if res := Check(Input{Ranges: 1, Procs: []Proc{{Name: "m3"}}}); res.Events != nil || strings.Contains(res.Table(), "logs record") {
		t.Fatalf("events reported with none logged: %v", res.Events)
	}
}

// TestEventMessagesAreShards checks that every counted message is one shard
// logs, word for word: a reworded log line would silently count nothing.
func TestEventMessagesAreShards(t *testing.T) {
	var src strings.Builder
	files, err := filepath.Glob("../../shard/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("shard's sources: %v %v", files, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, e := range Events {
		if !strings.Contains(src.String(), strconv.Quote(e.Message)) {
			t.Errorf("shard logs no %q", e.Message)
		}
	}
}

// countEvents counts events by name.
func countEvents(events []Event) map[string]int {
	out := map[string]int{}
	for _, e := range events {
		out[e.Name]++
	}
	return out
}
