package handover_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/stage"
)

// Core scenarios as data: each file of testdata/core steps one core with
// inputs written as lines, in the style of etcd raft's interaction tests.
// A file is a list of blocks: '#' comments and blank lines, one command,
// a line "----", and what the command printed, up to a blank line ("ok"
// when it printed nothing). A failing block stops its file; the failure
// names the block's line and its comment (or the latest one before it).
// -handover.rewrite writes what the runs print into the files.
//
// Members are written as their ids (node#incarnation); a topology takes
// their nodes. Durations are Go's (600ms, 1.2s). Lists are comma-separated.
// A word a command does not take is an error.
//
//	new self=ID ranges=N [discovery=N] [heal=N] [stale=D]
//	                            a new core (testConfig: discovery 1, the
//	                            simulator's lease timings)
//	topology ID...              Topology of the members' nodes
//	hello from=ID [reply] [state=leaving|gone] [active=R,..] [listing=R,..] [view=ID,..]
//	      [joined=N] [knowsyou] [heardyou] [ranges=N]
//	acquire from=ID epoch=N ranges=R,..
//	released from=ID epoch=N ranges=R,.. [record=REC]...
//	synced range=R [epoch=N] [quiet]
//	                            RangeSynced (epoch: the range's, from
//	                            Status; quiet: its watch has sent nothing)
//	live range=R [epoch=N]      RangeLive
//	stopped range=R [epoch=N] [record=REC] [unrecorded]
//	claimed range=R [epoch=N] (ok token=T | holder=ID gen=N | failed)
//	                            RecordsClaimed with one result: written,
//	                            refused (the record as it is), or failed
//	tick D | tick D..D [every=D]
//	                            Tick, or one every 200ms (the simulator's
//	                            tick) from D to D
//	leave
//	renewed seq=N start=D [now=D] token=N
//	renewfailed seq=N [start=D] [lost]
//	leases [now=D] ID=VERSION... [released=ID,..] [other=ID,..] [record=REC]...
//	       [stale=NAME:VERSION]...
//	                            other: those holders run another protocol
//	checked member=ID [found] [version=V] [released] [failed]
//	revoked member=ID version=V [ok]
//	status                      the core's Status
//	auto [writes=T] [sync] [drain] [off]
//	                            from now on the driver answers what the core
//	                            sends: lease writes and record claims
//	                            (LeaseRenewed, RecordsClaimed written, tokens
//	                            from T, started at the driver's time), range
//	                            starts (RangeSynced), deactivations
//	                            (RangeStopped with the record written with no
//	                            holder), and record writes again
//	                            (ReleaseRecord: RangeStopped, written)
//	now D                       the driver's time, for its answers (set too
//	                            by every tick and leases now=)
//
// A record REC is R:HOLDER:GEN[:NEXT] (HOLDER empty for none). What a command prints:
// each message the Step returned, "> to: what" in the syntax of the
// commands above (to: a member, ranges or lease); each answer the driver
// gave, "< what", followed by what it returned; each range whose status
// changed, "range R: state epoch=.. token=.. owner=.. waiting=..", and the
// view when it changed.
func TestCoreScenarios(t *testing.T) { runDataFiles(t, "core", runCoreFile) }

type coreBlock struct {
	before []string // comments and blank lines
	cmd    string
	line   int // of cmd, from 1
	want   []string
}

func parseCoreFile(t *testing.T, file, text string) []coreBlock {
	var out []coreBlock
	var cur coreBlock
	inWant, seenCmd := false, false
	for n, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		switch {
		case inWant && l == "":
			out, cur, inWant, seenCmd = append(out, cur), coreBlock{}, false, false
		case inWant:
			cur.want = append(cur.want, l)
		case l == "----":
			if !seenCmd {
				t.Fatalf("%s:%d: \"----\" with no command before it", file, n+1)
			}
			inWant = true
		case strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#"):
			if seenCmd {
				t.Fatalf("%s:%d: a comment between a command and its \"----\"", file, n+1)
			}
			cur.before = append(cur.before, l)
		default:
			if seenCmd {
				t.Fatalf("%s:%d: two commands in one block", file, n+1)
			}
			cur.cmd, cur.line, seenCmd = l, n+1, true
		}
	}
	if inWant {
		out = append(out, cur)
	} else if seenCmd {
		t.Fatalf("%s: the last command %q has no \"----\"", file, cur.cmd)
	}
	return out
}

func runCoreFile(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blocks := parseCoreFile(t, file, string(b))
	d := &coreDriver{t: t}
	var out strings.Builder
	var said []string // the latest comment, which the failure of a block without one repeats
	for _, blk := range blocks {
		if c := comments(blk.before); len(c) > 0 {
			said = c
		}
		got, err := d.run(blk.cmd)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", file, blk.line, blk.cmd, err)
		}
		if len(got) == 0 {
			got = []string{"ok"}
		}
		if !*rewrite && !slices.Equal(got, blk.want) {
			t.Fatalf("%s:%d: %s\n%s\ngot:\n%s\nwant:\n%s", file, blk.line, blk.cmd,
				strings.Join(said, "\n"), strings.Join(got, "\n"), strings.Join(blk.want, "\n"))
		}
		for _, l := range blk.before {
			out.WriteString(l + "\n")
		}
		out.WriteString(blk.cmd + "\n----\n" + strings.Join(got, "\n") + "\n\n")
	}
	writeBack(t, file, &out)
}

// commandKeys are the words each command takes (topology and leases take
// member ids, tick its times).
var commandKeys = map[string]string{
	"new":         "self ranges discovery heal stale",
	"hello":       "from reply state active view joined knowsyou heardyou ranges",
	"acquire":     "from epoch ranges",
	"released":    "from epoch ranges record",
	"synced":      "range epoch quiet",
	"live":        "range epoch",
	"stopped":     "range epoch record unrecorded",
	"claimed":     "range epoch ok token holder gen failed",
	"leave":       "",
	"renewed":     "seq start now token",
	"renewfailed": "seq start lost",
	"checked":     "member found version released failed",
	"revoked":     "member version ok",
	"status":      "",
	"auto":        "writes sync drain off",
}

// testConfig is a core's settings in the core scenarios: the simulator's
// lease timings, discovery over after one tick.
func testConfig(self handover.MemberID, ranges int) handover.Config {
	return handover.Config{Self: self, Ranges: ranges, HashField: "uid", DiscoveryTicks: 1,
		LeaseDuration: simLeaseDuration, RenewDeadline: simRenewDeadline, RetryPeriod: simRetryPeriod}
}

// comments are the comment lines of lines.
func comments(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return out
}

// coreDriver steps one core with the commands of a file.
type coreDriver struct {
	t   *testing.T
	cfg handover.Config
	c   *handover.Core
	now time.Duration

	autoWrites, autoSync, autoDrain bool
	token                           uint64         // the next auto write's
	gens                            map[int]uint64 // range: the generation of its record's last auto write

	last handover.Status
	out  []string
}

func (d *coreDriver) printf(format string, args ...any) {
	d.out = append(d.out, fmt.Sprintf(format, args...))
}

func (d *coreDriver) run(line string) ([]string, error) {
	d.out = nil
	f := strings.Fields(line)
	a, err := parseArgs(f[1:])
	if err != nil {
		return nil, err
	}
	if keys, ok := commandKeys[f[0]]; ok {
		for _, kv := range a.list {
			if !slices.Contains(strings.Fields(keys), kv[0]) {
				return nil, fmt.Errorf("%s takes no %q (it takes: %s)", f[0], kv[0], keys)
			}
		}
	}
	if f[0] != "new" && d.c == nil {
		return nil, fmt.Errorf("no core: \"new\" comes first")
	}
	switch f[0] {
	case "new":
		err = d.newCore(a)
	case "tick":
		err = d.tick(f[1:])
	case "status":
		d.printStatus()
	case "auto":
		d.auto(a)
	case "now":
		if len(f) != 2 {
			return nil, fmt.Errorf("now takes one time")
		}
		d.now, err = time.ParseDuration(f[1])
	default:
		var in handover.Input
		if in, err = d.input(f[0], f[1:], a); err == nil && a.err == nil {
			d.step(in)
		}
	}
	if err == nil {
		err = a.err
	}
	return d.out, err
}

// input is the core's input that command cmd writes.
func (d *coreDriver) input(cmd string, words []string, a *args) (handover.Input, error) {
	switch cmd {
	case "topology":
		tp := &handover.Topology{}
		for _, m := range words {
			tp.Nodes = append(tp.Nodes, handover.MemberID(m).Node())
		}
		return tp, nil
	case "hello":
		return d.parseHello(a)
	case "acquire":
		return &handover.Acquire{From: a.member("from"), Epoch: a.uint("epoch"), Ranges: a.ints("ranges")}, nil
	case "released":
		recs, err := records(a)
		return &handover.Released{From: a.member("from"), Epoch: a.uint("epoch"), Ranges: a.ints("ranges"), Records: recs}, err
	case "synced":
		r := a.int("range")
		return &handover.RangeSynced{Range: r, Epoch: d.epoch(a, r), Live: !a.flag("quiet")}, nil
	case "live":
		r := a.int("range")
		return &handover.RangeLive{Range: r, Epoch: d.epoch(a, r)}, nil
	case "stopped":
		r := a.int("range")
		m := &handover.RangeStopped{Range: r, Epoch: d.epoch(a, r), Unrecorded: a.flag("unrecorded")}
		recs, err := records(a)
		if len(recs) > 0 {
			m.Record = &recs[0]
		}
		return m, err
	case "claimed":
		r := a.int("range")
		res := handover.ClaimResult{Range: r, Epoch: d.epoch(a, r), OK: a.flag("ok"), Token: a.uint("token")}
		if _, ok := a.get("gen"); ok {
			res.Record = handover.RecordState{Range: r, Holder: a.member("holder"), Gen: a.uint("gen")}
		}
		if res.OK {
			res.Record = handover.RecordState{Range: r, Holder: d.cfg.Self, Gen: d.c.Status().Ranges[r].Record.Gen + 1}
		}
		return &handover.RecordsClaimed{Results: []handover.ClaimResult{res}}, nil
	case "leave":
		return &handover.Leave{}, nil
	case "renewed":
		return &handover.LeaseRenewed{Seq: a.uint("seq"), Start: a.dur("start"), Now: a.dur("now"), Token: a.uint("token")}, nil
	case "renewfailed":
		return &handover.LeaseRenewFailed{Seq: a.uint("seq"), Start: a.dur("start"), Lost: a.flag("lost")}, nil
	case "leases":
		m := &handover.Leases{}
		for _, kv := range a.list {
			switch kv[0] {
			case "now":
				m.Now = a.dur("now")
				d.now = m.Now
			case "released":
				m.Released = a.members("released")
			case "other", "record":
			case "stale":
				name, version, _ := strings.Cut(kv[1], ":")
				m.Stale = append(m.Stale, handover.StaleLease{Name: name, Version: version})
			default:
				m.Leases = append(m.Leases, handover.LeaseRecord{Holder: handover.MemberID(kv[0]), Version: kv[1],
					Other: slices.Contains(a.members("other"), handover.MemberID(kv[0]))})
			}
		}
		recs, err := records(a)
		m.Records = recs
		return m, err
	case "checked":
		return &handover.LeaseChecked{Member: a.member("member"), Found: a.flag("found"), Version: a.str("version"),
			Released: a.flag("released"), Failed: a.flag("failed")}, nil
	case "revoked":
		return &handover.LeaseRevoked{Member: a.member("member"), Version: a.str("version"), OK: a.flag("ok")}, nil
	}
	return nil, fmt.Errorf("unknown command %q", cmd)
}

// records are the record= words of a.
func records(a *args) ([]handover.RecordState, error) {
	var out []handover.RecordState
	for _, s := range a.all("record") {
		p := strings.Split(s, ":")
		if len(p) == 3 {
			p = append(p, "")
		}
		if len(p) != 4 {
			return nil, fmt.Errorf("record %q: want range:holder:gen[:next]", s)
		}
		r, err1 := strconv.Atoi(p[0])
		g, err2 := strconv.ParseUint(p[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("record %q: want range:holder:gen", s)
		}
		out = append(out, handover.RecordState{Range: r, Holder: handover.MemberID(p[1]), Gen: g, Next: handover.MemberID(p[3])})
	}
	return out, nil
}

func recordString(rs handover.RecordState) string {
	s := fmt.Sprintf("%d:%s:%d", rs.Range, rs.Holder, rs.Gen)
	if rs.Next != "" {
		s += ":" + string(rs.Next)
	}
	return s
}

// auto sets the driver's answers.
func (d *coreDriver) auto(a *args) {
	if a.flag("off") {
		d.autoWrites, d.autoSync, d.autoDrain = false, false, false
	}
	if _, ok := a.get("writes"); ok {
		d.autoWrites, d.token = true, a.uint("writes")
	}
	d.autoSync = d.autoSync || a.flag("sync")
	d.autoDrain = d.autoDrain || a.flag("drain")
}

func (d *coreDriver) newCore(a *args) error {
	self := a.member("self")
	d.cfg = testConfig(self, a.int("ranges"))
	if _, ok := a.get("discovery"); ok {
		d.cfg.DiscoveryTicks = a.int("discovery")
	}
	if _, ok := a.get("heal"); ok {
		d.cfg.HealTicks = a.int("heal")
	}
	if _, ok := a.get("stale"); ok {
		d.cfg.StaleAge = a.dur("stale")
	}
	if err := d.cfg.Validate(); err != nil {
		return err
	}
	d.c = handover.NewCore(d.cfg)
	d.now, d.gens = 0, map[int]uint64{}
	d.autoWrites, d.autoSync, d.autoDrain = false, false, false
	d.c.StatusInto(&d.last)
	d.last.Ranges = slices.Clone(d.last.Ranges)
	return nil
}

func (d *coreDriver) epoch(a *args, r int) uint64 {
	if _, ok := a.get("epoch"); ok {
		return a.uint("epoch")
	}
	return d.c.Status().Ranges[r].Epoch
}

func (d *coreDriver) tick(f []string) error {
	if len(f) == 0 {
		return fmt.Errorf("tick: no time")
	}
	every := simTick
	if len(f) > 1 {
		a, err := parseArgs(f[1:])
		if err != nil {
			return err
		}
		if every = a.dur("every"); a.err != nil || every <= 0 {
			return fmt.Errorf("tick: %v (every=%v)", a.err, every)
		}
	}
	from, to, isRange := strings.Cut(f[0], "..")
	start, err := time.ParseDuration(from)
	if err != nil {
		return err
	}
	if !isRange {
		d.now = start
		d.step(&handover.Tick{Now: start})
		return nil
	}
	end, err := time.ParseDuration(to)
	if err != nil {
		return err
	}
	all := d.out
	for now := start; now <= end; now += every {
		d.out = nil
		d.now = now
		d.step(&handover.Tick{Now: now})
		if len(d.out) > 0 {
			all = append(all, "at "+now.String())
			all = append(all, d.out...)
		}
	}
	d.out = all
	return nil
}

// step steps the core with in, prints what it returned and what changed,
// and gives the answers of the auto modes, breadth first (each round's
// answers after the round).
func (d *coreDriver) step(in handover.Input) {
	queue := d.stepOne(in)
	for len(queue) > 0 {
		var next []handover.Input
		for _, in := range queue {
			d.printf("< %s", inputString(in))
			next = append(next, d.stepOne(in)...)
		}
		queue = next
	}
}

func (d *coreDriver) stepOne(in handover.Input) (answers []handover.Input) {
	msgs := d.c.Step(in)
	for _, m := range msgs {
		d.printf("> %s: %s", d.addrString(m.To), d.msgString(m.Body))
	}
	for _, m := range msgs { // read before the core steps again
		switch e := m.Body.(type) {
		case *handover.RenewLease:
			if d.autoWrites {
				answers = append(answers, &handover.LeaseRenewed{Seq: e.Seq, Start: d.now, Now: d.now, Token: d.token})
				d.token++
			}
		case *handover.ClaimRecords:
			if d.autoWrites {
				res := &handover.RecordsClaimed{}
				for _, cl := range e.Claims {
					d.gens[cl.Range] = cl.Gen + 1
					res.Results = append(res.Results, handover.ClaimResult{Range: cl.Range, Epoch: cl.Epoch, OK: true, Token: d.token,
						Record: handover.RecordState{Range: cl.Range, Holder: d.cfg.Self, Gen: cl.Gen + 1}})
				}
				d.token++
				answers = append(answers, res)
			}
		case *handover.StartRange:
			if d.autoSync {
				answers = append(answers, &handover.RangeSynced{Range: e.Range, Epoch: e.Epoch, Live: true})
			}
		case *handover.DeactivateRange:
			if d.autoDrain {
				d.gens[e.Range]++
				answers = append(answers, &handover.RangeStopped{Range: e.Range, Epoch: e.Epoch,
					Record: &handover.RecordState{Range: e.Range, Gen: d.gens[e.Range], Next: e.To}})
			}
		case *handover.ReleaseRecord:
			if d.autoDrain {
				d.gens[e.Range]++
				answers = append(answers, &handover.RangeStopped{Range: e.Range, Epoch: e.Epoch,
					Record: &handover.RecordState{Range: e.Range, Gen: d.gens[e.Range]}})
			}
		}
	}
	d.printChanges()
	return answers
}

func (d *coreDriver) printChanges() {
	var s handover.Status
	d.c.StatusInto(&s)
	if !slices.Equal(s.View, d.last.View) {
		d.printf("view: %s", joinMembers(s.View))
	}
	for r, rs := range s.Ranges {
		if !rangeStatusEqual(rs, d.last.Ranges[r]) {
			d.printf("range %d: %s", r, rangeString(rs))
		}
	}
	d.last = s
}

func rangeStatusEqual(a, b handover.RangeStatus) bool {
	return a.State == b.State && a.Epoch == b.Epoch && a.Token == b.Token && a.Owner == b.Owner && a.Record == b.Record && slices.Equal(a.Waiting, b.Waiting)
}

func (d *coreDriver) printStatus() {
	s := d.c.Status()
	var w []string
	w = append(w, "self="+string(s.Self), "view="+joinMembers(s.View))
	for _, f := range []struct {
		on   bool
		name string
	}{{s.Discovering, "discovering"}, {s.Settled, "settled"}, {s.Leaving, "leaving"}, {s.Done, "done"}} {
		if f.on {
			w = append(w, f.name)
		}
	}
	if s.Failed != "" {
		w = append(w, fmt.Sprintf("failed=%q", s.Failed))
	}
	if s.Fenced != "" {
		w = append(w, fmt.Sprintf("fenced=%q", s.Fenced))
	}
	w = append(w, "validuntil="+s.ValidUntil.String(), fmt.Sprintf("token=%d", s.Token))
	d.printf("%s", strings.Join(w, " "))
	for r, rs := range s.Ranges {
		d.printf("range %d: %s", r, rangeString(rs))
	}
}

func rangeString(rs handover.RangeStatus) string {
	s := fmt.Sprintf("%s epoch=%d", rs.State, rs.Epoch)
	if rs.Token != 0 {
		s += fmt.Sprintf(" token=%d", rs.Token)
	}
	if rs.Owner != "" {
		s += " owner=" + string(rs.Owner)
	}
	if len(rs.Waiting) > 0 {
		s += " waiting=" + joinMembers(rs.Waiting)
	}
	if rs.Record.Gen > 0 {
		s += fmt.Sprintf(" record=%s:%d", rs.Record.Holder, rs.Record.Gen)
		if rs.Record.Next != "" {
			s += ":" + string(rs.Record.Next)
		}
	}
	return s
}

func (d *coreDriver) addrString(a stage.Addr) string {
	switch a.Kind {
	case handover.Member:
		return string(d.c.Member(a.ID))
	case handover.Ranges:
		return "ranges"
	case handover.Lease:
		return "lease"
	}
	return a.Kind.String()
}

// msgString is an effect or message as the commands write it.
func (d *coreDriver) msgString(body any) string {
	switch m := body.(type) {
	case *handover.Hello:
		return helloString(m, d.cfg)
	case *handover.Reject:
		return fmt.Sprintf("reject reason=%q", m.Reason)
	case *handover.StartRange:
		s := fmt.Sprintf("start range=%d epoch=%d", m.Range, m.Epoch)
		if m.From != "" {
			s += " from=" + string(m.From)
		}
		if m.Cold != "" {
			s += fmt.Sprintf(" cold=%q", m.Cold)
		}
		return s
	case *handover.ActivateRange:
		return fmt.Sprintf("activate range=%d epoch=%d token=%d", m.Range, m.Epoch, m.Token)
	case *handover.DeactivateRange:
		s := fmt.Sprintf("deactivate range=%d epoch=%d", m.Range, m.Epoch)
		if m.To != "" {
			s += " to=" + string(m.To)
		}
		return s
	case *handover.StopRange:
		return fmt.Sprintf("stop range=%d epoch=%d", m.Range, m.Epoch)
	case *handover.DrainTimeUp:
		return fmt.Sprintf("draintimeup range=%d epoch=%d", m.Range, m.Epoch)
	case *handover.ReleaseRecord:
		return fmt.Sprintf("recordagain range=%d epoch=%d", m.Range, m.Epoch)
	case *handover.Failed:
		return fmt.Sprintf("failed reason=%q", m.Reason)
	case *handover.Left:
		if m.TimeUp {
			return "left timeup"
		}
		return "left"
	case *handover.Fenced:
		s := "fenced"
		if m.LeftOut {
			s += " leftout"
		}
		return s + fmt.Sprintf(" reason=%q", m.Reason)
	case *handover.RenewLease:
		s := fmt.Sprintf("renew seq=%d", m.Seq)
		if m.Create {
			s += " create"
		}
		return s
	case *handover.SetValidity:
		return "validity until=" + m.Until.String()
	case *handover.CheckLease:
		return "check member=" + string(m.Member)
	case *handover.RevokeLease:
		return fmt.Sprintf("revoke member=%s version=%s", m.Member, m.Version)
	case *handover.DeleteLease:
		return fmt.Sprintf("delete name=%s version=%s", m.Name, m.Version)
	case *handover.ClaimRecords:
		var w []string
		for _, cl := range m.Claims {
			w = append(w, fmt.Sprintf("range=%d epoch=%d gen=%d", cl.Range, cl.Epoch, cl.Gen))
		}
		return "claim " + strings.Join(w, "; ")
	case handover.Input:
		return inputString(m)
	}
	return fmt.Sprintf("%T %+v", body, body)
}

// inputString is an input as the commands write it.
func inputString(in handover.Input) string {
	switch m := in.(type) {
	case *handover.Acquire:
		return fmt.Sprintf("acquire from=%s epoch=%d ranges=%s", m.From, m.Epoch, joinInts(m.Ranges))
	case *handover.Released:
		s := fmt.Sprintf("released from=%s epoch=%d ranges=%s", m.From, m.Epoch, joinInts(m.Ranges))
		for _, rs := range m.Records {
			s += " record=" + recordString(rs)
		}
		return s
	case *handover.RangeSynced:
		s := fmt.Sprintf("synced range=%d epoch=%d", m.Range, m.Epoch)
		if !m.Live {
			s += " quiet"
		}
		return s
	case *handover.RangeLive:
		return fmt.Sprintf("live range=%d epoch=%d", m.Range, m.Epoch)
	case *handover.RangeStopped:
		s := fmt.Sprintf("stopped range=%d epoch=%d", m.Range, m.Epoch)
		if m.Record != nil {
			s += " record=" + recordString(*m.Record)
		}
		if m.Unrecorded {
			s += " unrecorded"
		}
		return s
	case *handover.RecordsClaimed:
		var w []string
		for _, res := range m.Results {
			x := fmt.Sprintf("claimed range=%d epoch=%d", res.Range, res.Epoch)
			switch {
			case res.OK:
				x += fmt.Sprintf(" ok token=%d", res.Token)
			case res.Record.Gen == 0:
				x += " failed"
			default:
				x += fmt.Sprintf(" holder=%s gen=%d", res.Record.Holder, res.Record.Gen)
			}
			w = append(w, x)
		}
		return strings.Join(w, "; ")
	case *handover.LeaseRenewed:
		return fmt.Sprintf("renewed seq=%d start=%v now=%v token=%d", m.Seq, m.Start, m.Now, m.Token)
	}
	return fmt.Sprintf("%T %+v", in, in)
}

func helloString(h *handover.Hello, cfg handover.Config) string {
	var w []string
	w = append(w, "hello")
	if h.Ranges != cfg.Ranges {
		w = append(w, fmt.Sprintf("ranges=%d", h.Ranges))
	}
	if h.HashField != cfg.HashField {
		w = append(w, fmt.Sprintf("hash=%q", h.HashField))
	}
	if h.JoinedAt != 0 {
		w = append(w, fmt.Sprintf("joined=%d", h.JoinedAt))
	}
	if h.State != handover.Joined {
		w = append(w, "state="+h.State.String())
	}
	if len(h.Active) > 0 {
		w = append(w, "active="+joinInts(h.Active))
	}
	if len(h.Listing) > 0 {
		w = append(w, "listing="+joinInts(h.Listing))
	}
	if len(h.View) > 0 {
		w = append(w, "view="+joinMembers(h.View))
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{h.Reply, "reply"}, {h.KnowsYou, "knowsyou"}, {h.HeardYou, "heardyou"}} {
		if f.on {
			w = append(w, f.name)
		}
	}
	return strings.Join(w, " ")
}

func (d *coreDriver) parseHello(a *args) (*handover.Hello, error) {
	h := &handover.Hello{From: a.member("from"), Ranges: d.cfg.Ranges, HashField: d.cfg.HashField,
		JoinedAt: int64(a.int("joined")), Active: a.ints("active"), Listing: a.ints("listing"), View: a.members("view"),
		Reply: a.flag("reply"), KnowsYou: a.flag("knowsyou"), HeardYou: a.flag("heardyou")}
	if _, ok := a.get("ranges"); ok {
		h.Ranges = a.int("ranges")
	}
	switch s, _ := a.get("state"); s {
	case "", "joined":
	case "leaving":
		h.State = handover.Leaving
	case "gone":
		h.State = handover.Gone
	default:
		return nil, fmt.Errorf("state %q", s)
	}
	return h, nil
}

// args are a command's key=value and flag words; the first bad value is
// kept in err.
type args struct {
	list [][2]string
	err  error
}

func parseArgs(words []string) (*args, error) {
	a := &args{}
	for _, w := range words {
		k, v, _ := strings.Cut(w, "=")
		if k == "" {
			return nil, fmt.Errorf("%q: no name", w)
		}
		a.list = append(a.list, [2]string{k, v})
	}
	return a, nil
}

func (a *args) get(k string) (string, bool) {
	for _, kv := range a.list {
		if kv[0] == k {
			return kv[1], true
		}
	}
	return "", false
}

func (a *args) all(k string) []string {
	var out []string
	for _, kv := range a.list {
		if kv[0] == k {
			out = append(out, kv[1])
		}
	}
	return out
}

func (a *args) fail(k, v string, err error) {
	if a.err == nil {
		a.err = fmt.Errorf("%s=%s: %v", k, v, err)
	}
}

func (a *args) flag(k string) bool { _, ok := a.get(k); return ok }
func (a *args) str(k string) string {
	v, _ := a.get(k)
	return v
}
func (a *args) member(k string) handover.MemberID { return handover.MemberID(a.str(k)) }

func (a *args) int(k string) int {
	v, ok := a.get(k)
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		a.fail(k, v, err)
	}
	return n
}

func (a *args) uint(k string) uint64 {
	v, ok := a.get(k)
	if !ok {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		a.fail(k, v, err)
	}
	return n
}

func (a *args) dur(k string) time.Duration {
	v, ok := a.get(k)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		a.fail(k, v, err)
	}
	return d
}

func (a *args) ints(k string) []int {
	v, ok := a.get(k)
	if !ok || v == "" {
		return nil
	}
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			a.fail(k, v, err)
		}
		out = append(out, n)
	}
	return out
}

func (a *args) members(k string) []handover.MemberID {
	v, ok := a.get(k)
	if !ok || v == "" {
		return nil
	}
	var out []handover.MemberID
	for _, s := range strings.Split(v, ",") {
		out = append(out, handover.MemberID(s))
	}
	return out
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func joinMembers(ms []handover.MemberID) string {
	if len(ms) == 0 {
		return "-"
	}
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = string(m)
	}
	return strings.Join(s, ",")
}
