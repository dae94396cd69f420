package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/internal/informertest"
	"github.com/actorinformer/actorinformer/listener"
	"github.com/actorinformer/actorinformer/reflector"
	"github.com/actorinformer/actorinformer/stage"
)

// Sim is the whole pipeline in one goroutine: the cores behind modelled
// shells (stages.go), one mailbox per stage delivered in the order a script
// says (per-recipient FIFO kept), the scripted API server and a virtual
// clock. Exec runs one script line; after each, the invariants are checked.
type Sim struct {
	clk *simClock
	srv *server

	watchList     bool
	maxBatch      int
	defaultResync time.Duration
	checkPeriod   time.Duration

	refl *reflector.Machine
	q    *queueStage
	ix   *indexerStage
	ls   []*handlerState

	// boxes are the mailboxes: the stages', and a Coalesced handler's
	// runner's (at its stage.ToHandler address).
	boxes map[stage.Addr][]stage.Msg
	// timers are the stages' timers, by address.
	timers map[stage.Addr]clock.Timer
	// reflStatus is what the reflector last reported.
	reflStatus reflector.Status
	started    bool
	synced     bool

	// Lines is the script run so far; Calls the handler calls, one line
	// each ("h1 add ns/a 3 initial").
	Lines []string
	Calls []string
	errs  []string
	// HandleErrors counts the reflector's calls of its watch error handler;
	// lastWatchErr is the error of the last.
	HandleErrors int
	lastWatchErr error
	// WatchListWarnings are what the reflector logged of a WatchList
	// stream waiting for its initial-events-end bookmark.
	WatchListWarnings []string
	// lastRV are the highest resource versions seen of the reflector and
	// of the cache: neither may go back.
	lastReflRV, lastCacheRV int64
	// keepGoing: quiesce goes on after a violation.
	keepGoing bool
	// slow names the handler a random script rarely delivers to.
	slow string
	// coalesce: a random script makes some handlers Coalesced.
	coalesce bool
	// detect: the informer runs the cache mutation detector, det, whose
	// next check is due at nextCheck.
	detect    bool
	det       *indexer.MutationDetector
	nextCheck time.Time
	// deliveries counts the messages delivered; beforeDelivery, if set,
	// is called before each with that count (tests inject faults there).
	deliveries     int
	beforeDelivery func(n int)
}

type handlerState struct {
	name   string
	resync time.Duration
	// added is when the handler was added: its first resync period counts
	// from then.
	added time.Time
	st    *listenerStage
	view  *view
	// projected is the view once the handler has had what its mailbox
	// holds; queuedInitial counts the initial batches and initial-list
	// notifications there.
	projected     map[string]string
	queuedInitial int
	// queuedItems and queuedInitialItems count the notifications in the
	// mailbox, and those of them from an initial list.
	queuedItems, queuedInitialItems int
}

// queued accounts for m entering (sign 1) or leaving (-1) l's mailbox.
func (l *handlerState) queued(m stage.Msg, sign int) {
	if sign > 0 {
		l.st.mailboxItems([]stage.Msg{m}, func(it *indexer.Notification) {
			k := informertest.Key(it.New)
			if it.Type == indexer.NotifyDelete {
				delete(l.projected, k)
			} else {
				l.projected[k] = rvOf(it.New)
			}
			if it.Type == indexer.NotifyUpdate && uidOf(it.Old) != uidOf(it.New) {
				l.view.uidChanges[k]++
			}
			switch {
			case it.Type == indexer.NotifyAdd && it.InitialList:
				l.view.expectInitial[k] = true
			case it.Type == indexer.NotifyDelete:
				delete(l.view.expectInitial, k)
			}
		})
	}
	if b, ok := m.Body.(*indexer.Notifications); ok {
		n := 0
		for i := range b.Items {
			if b.Items[i].InitialList {
				n++
			}
		}
		l.queuedInitialItems += sign * n
		l.queuedItems += sign * len(b.Items)
		if b.Initial {
			n++
		}
		l.queuedInitial += sign * n
	}
}

// New returns a simulator before its script's first line.
func New() *Sim {
	return &Sim{clk: newSimClock(), srv: newServer(), maxBatch: 4, boxes: map[stage.Addr][]stage.Msg{}, timers: map[stage.Addr]clock.Timer{}}
}

// Err returns the invariant violations so far, "" if none.
func (s *Sim) Err() string { return strings.Join(s.errs, "\n") }

func (s *Sim) failf(format string, args ...any) {
	if len(s.errs) < 20 {
		s.errs = append(s.errs, fmt.Sprintf(format, args...))
	}
}

// Run executes the lines of a script in order, stopping at the first
// violation. It returns Err().
func (s *Sim) Run(script []string) string {
	for _, l := range script {
		if err := s.Exec(l); err != nil {
			s.failf("line %q: %v", l, err)
		}
		if len(s.errs) > 0 {
			break
		}
	}
	return s.Err()
}

// ParseScript splits a script into lines: newlines or ';' separate them,
// '#' starts a comment.
func ParseScript(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		for _, l := range strings.Split(line, ";") {
			if l = strings.Join(strings.Fields(l), " "); l != "" {
				out = append(out, l)
			}
		}
	}
	return out
}

// FormatScript is the one-line form of a script (for -sim.script).
func FormatScript(lines []string) string { return strings.Join(lines, "; ") }

func (s *Sim) listenerByName(name string) *handlerState {
	for _, l := range s.ls {
		if l.name == name {
			return l
		}
	}
	return nil
}

func (s *Sim) addr(name string) (stage.Addr, error) {
	switch name {
	case "reflector":
		return stage.ToReflector, nil
	case "fifo":
		return stage.ToQueue, nil
	case "indexer":
		return stage.ToIndexer, nil
	}
	if l := s.listenerByName(name); l != nil {
		return stage.ToListener(l.st.id), nil
	}
	if n, ok := strings.CutSuffix(name, ".runner"); ok {
		if l := s.listenerByName(n); l != nil && l.st.coalesced() {
			return stage.ToHandler(l.st.id), nil
		}
	}
	return stage.Addr{}, fmt.Errorf("no stage %q", name)
}

func (s *Sim) push(m stage.Msg) {
	if k := m.To.Kind; k.IsEffect() {
		s.perform(m)
		return
	}
	if m.To.Kind == stage.Listener {
		s.ls[m.To.ID-1].queued(m, 1)
	}
	s.boxes[m.To] = append(s.boxes[m.To], m)
}

func (s *Sim) pushAll(ms []stage.Msg) {
	for _, m := range ms {
		s.push(m)
	}
}

// deliver delivers the head of a's mailbox; false if it is empty.
func (s *Sim) deliver(a stage.Addr) bool {
	if len(s.boxes[a]) == 0 {
		return false
	}
	if f := s.beforeDelivery; f != nil {
		s.beforeDelivery = nil // not for the lines it runs
		f(s.deliveries)
		s.beforeDelivery = f
		if len(s.boxes[a]) == 0 { // a restart dropped it
			return true
		}
	}
	s.deliveries++
	box := s.boxes[a]
	m := box[0]
	box[0] = stage.Msg{}
	s.boxes[a] = box[1:]
	if a.Kind == stage.Listener {
		s.ls[a.ID-1].queued(m, -1)
	}
	s.pushAll(s.step(a, m.Body))
	return true
}

// addrs is every mailbox in a fixed order.
func (s *Sim) addrs() []stage.Addr {
	out := []stage.Addr{stage.ToReflector, stage.ToQueue, stage.ToIndexer}
	for _, l := range s.ls {
		out = append(out, stage.ToListener(l.st.id))
		if l.st.coalesced() {
			out = append(out, stage.ToHandler(l.st.id))
		}
	}
	return out
}

func (s *Sim) stageName(a stage.Addr) string {
	switch a.Kind {
	case stage.Listener:
		return s.ls[a.ID-1].name
	case stage.Handler:
		return s.ls[a.ID-1].name + ".runner"
	}
	return a.Kind.String()
}

func (s *Sim) newListener(name string, resync time.Duration, coalesced bool) *handlerState {
	l := &handlerState{name: name, resync: resync, added: s.clk.Now(), projected: map[string]string{}}
	l.view = newView(s, name)
	l.st = newListenerStage(uint64(len(s.ls)+1), l.view, coalesced)
	s.ls = append(s.ls, l)
	return l
}

func parseDur(args []string, i int) (time.Duration, error) {
	if len(args) <= i {
		return 0, nil
	}
	return time.ParseDuration(args[i])
}

// Exec runs one script line (see the package documentation) and checks
// the invariants.
func (s *Sim) Exec(line string) error {
	args := strings.Fields(line)
	if len(args) == 0 {
		return nil
	}
	s.Lines = append(s.Lines, line)
	// "handler" and "add" take a trailing "coalesced".
	coalesced := false
	if n := len(args); n > 2 && args[n-1] == "coalesced" && (args[0] == "handler" || args[0] == "add") {
		coalesced = true
		args = args[:n-1]
	}
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		return ""
	}
	cmd := args[0]
	if !s.started {
		switch cmd {
		case "watchlist":
			s.watchList = true
			return nil
		case "nobookmark":
			s.srv.noBookmark = true
			return nil
		case "detector":
			s.detect = true
			return nil
		case "advance":
			d, err := parseDur(args, 1)
			if err != nil {
				return err
			}
			s.advance(d)
			return nil
		case "batch":
			n, err := strconv.Atoi(arg(1))
			if err != nil || n <= 0 {
				return fmt.Errorf("bad batch size")
			}
			s.maxBatch = n
			return nil
		case "resync":
			d, err := parseDur(args, 1)
			s.defaultResync = d
			return err
		case "handler":
			d, err := parseDur(args, 2)
			if err != nil || arg(1) == "" || s.listenerByName(arg(1)) != nil {
				return fmt.Errorf("bad handler line")
			}
			s.newListener(arg(1), d, coalesced)
			return nil
		case "start":
			s.start()
			s.check()
			return nil
		case "create", "update", "delete":
			s.srv.mutate(cmd, arg(1))
			return nil
		}
		return fmt.Errorf("%q before start", cmd)
	}
	switch cmd {
	case "create", "update", "delete":
		s.srv.mutate(cmd, arg(1))
	case "bookmark":
		s.srv.bookmark()
	case "lose":
		// Not a fault the pipeline must survive: a lost message, to test
		// that the checks catch one.
		a, err := s.addr(arg(1))
		if err != nil {
			return err
		}
		if box := s.boxes[a]; len(box) > 0 {
			if a.Kind == stage.Listener {
				s.ls[a.ID-1].queued(box[0], -1)
			}
			s.boxes[a] = box[1:]
		}
	case "crash":
		n, err := strconv.Atoi(arg(1))
		if err != nil || n < 0 {
			return fmt.Errorf("bad crash line")
		}
		s.ix.crash.after = n
	case "repeat":
		s.srv.repeat()
	case "burst":
		n, err := strconv.Atoi(arg(1))
		if err != nil {
			return err
		}
		for i := range n {
			s.srv.mutate("create", keys[(int(s.srv.rv)+i)%len(keys)])
		}
	case "compact":
		s.srv.compacted = s.srv.rv
	case "answer":
		code := 0
		if arg(1) == "old" {
			back, err := strconv.ParseInt(arg(2), 10, 64)
			if err != nil {
				return err
			}
			if r := s.srv.answerOld(back); r != nil {
				s.push(stage.Msg{To: stage.ToReflector, Body: r})
				break
			}
			for _, r := range s.srv.answer(0) {
				s.push(stage.Msg{To: stage.ToReflector, Body: r})
			}
			break
		}
		if a := arg(1); a != "" {
			var err error
			if code, err = strconv.Atoi(a); err != nil {
				return err
			}
		}
		for _, r := range s.srv.answer(code) {
			s.push(stage.Msg{To: stage.ToReflector, Body: r})
		}
	case "flush":
		n, _ := strconv.Atoi(arg(1))
		s.flush(n)
	case "cut":
		if st := s.srv.stream; st != nil {
			st.closed = true
		}
	case "gone", "werr":
		if st := s.srv.stream; st != nil && !st.closed {
			code := 410
			if cmd == "werr" {
				code = 500
			}
			st.events = append(st.events, errEvent(callError(code)))
			st.closed = true
		}
	case "deliver":
		a, err := s.addr(arg(1))
		if err != nil {
			return err
		}
		s.deliver(a)
	case "tick":
		s.clk.next()
		s.checkDetector()
	case "advance":
		d, err := parseDur(args, 1)
		if err != nil {
			return err
		}
		s.advance(d)
	case "restart":
		a, err := s.addr(arg(1))
		if err != nil {
			return err
		}
		s.restart(a)
	case "add":
		d, err := parseDur(args, 2)
		if err != nil || arg(1) == "" || s.listenerByName(arg(1)) != nil {
			return fmt.Errorf("bad add line")
		}
		if d > 0 && d < s.checkPeriod {
			d = s.checkPeriod // client-go: a started informer does not check more often
		}
		l := s.newListener(arg(1), d, coalesced)
		s.push(l.st.subscribe(d, s.clk.Now(), true))
		s.pushAll(s.life(stage.ToListener(l.st.id), stage.Started))
	case "remove":
		l := s.listenerByName(arg(1))
		if l == nil {
			return fmt.Errorf("no handler %q", arg(1))
		}
		if !l.st.removed.Load() {
			l.st.removed.Store(true)
			s.push(stage.Msg{To: stage.ToIndexer, Body: &indexer.Unsubscribe{ID: indexer.ListenerID(l.st.id)}})
		}
	case "panic":
		l := s.listenerByName(arg(1))
		if l == nil {
			return fmt.Errorf("no handler %q", arg(1))
		}
		l.view.panicNext = true
	case "mutate":
		l := s.listenerByName(arg(1))
		if l == nil {
			return fmt.Errorf("no handler %q", arg(1))
		}
		l.view.mutateNext = true
	case "quiesce":
		s.quiesce()
		return nil
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	s.check()
	return nil
}

func (s *Sim) start() {
	s.started = true
	s.checkPeriod = s.defaultResync
	for _, l := range s.ls {
		if l.resync > 0 && l.resync < s.checkPeriod {
			s.checkPeriod = l.resync
		}
	}
	// The reflector logs warnings of the faults scripts inject; those of
	// a WatchList stream waiting for its bookmark are kept.
	s.refl = newMachine(s.clk, s.watchList, coreTelemetry(func(msg string) {
		if strings.HasPrefix(msg, "WatchList stream hasn't received") {
			s.WatchListWarnings = append(s.WatchListWarnings, msg)
		}
	}))
	tel := coreTelemetry(func(msg string) {
		if s.ix != nil && s.ix.recovering {
			s.ix.recoveryLogs = append(s.ix.recoveryLogs, msg) // expected
			return
		}
		s.failf("a core logged: %s", msg)
	})
	s.ix = newIndexerStage(s.clk, s.checkPeriod, tel)
	s.q = newQueueStage(s.ix.store, s.maxBatch, s.clk, tel)
	// The supervisor spawns the indexer and the queue, subscribes the
	// handlers added before start, then spawns the reflector.
	s.pushAll(s.life(stage.ToIndexer, stage.Started))
	s.pushAll(s.life(stage.ToQueue, stage.Started))
	for _, l := range s.ls {
		l.st.counters.InitialDone.Store(true) // handlers added before start
		s.push(l.st.subscribe(l.resync, l.added, false))
		s.pushAll(s.life(stage.ToListener(l.st.id), stage.Started))
	}
	if s.detect {
		s.startDetector()
	}
	s.pushAll(s.life(stage.ToReflector, stage.Started))
}

// flush moves up to n (0: all) events of the open watch to the reflector
// as one batch; once a closed stream is empty, its end.
func (s *Sim) flush(n int) {
	st := s.srv.stream
	if st == nil {
		return
	}
	if n <= 0 || n > len(st.events) {
		n = len(st.events)
	}
	if n > 0 {
		evs := slices.Clone(st.events[:n])
		st.events = slices.Delete(st.events, 0, n)
		s.push(stage.Msg{To: stage.ToReflector, Body: &reflector.WatchEvents{Gen: st.gen, Events: evs}})
	}
	if len(st.events) == 0 && st.closed {
		s.srv.stream = nil
		s.push(stage.Msg{To: stage.ToReflector, Body: &reflector.WatchEnded{Gen: st.gen}})
	}
}

// quiesce delivers everything in a fixed order, answers calls, flushes
// the watch and moves time to the next timer while the reflector is not
// watching, until nothing is pending and the reflector watches; then it
// checks the final invariants.
func (s *Sim) quiesce() {
	if !s.started {
		s.failf("quiesce before start")
		return
	}
	for i := 0; ; i++ {
		if i == 100000 {
			s.failf("no quiescence after %d steps (reflector %v)", i, s.refl.State())
			return
		}
		if len(s.errs) > 0 && !s.keepGoing {
			return
		}
		progressed := false
		for _, a := range s.addrs() {
			if s.deliver(a) {
				progressed = true
				break
			}
		}
		switch {
		case progressed:
		case s.srv.call != nil:
			for _, r := range s.srv.answer(0) {
				s.push(stage.Msg{To: stage.ToReflector, Body: r})
			}
		case s.srv.stream != nil && (len(s.srv.stream.events) > 0 || s.srv.stream.closed):
			s.flush(0)
		case s.refl.State() == reflector.StateWatching && s.srv.stream != nil:
			s.check()
			s.checkFinal()
			return
		default:
			if !s.clk.next() {
				s.failf("stuck: nothing to deliver, no timer, reflector %v", s.refl.State())
				return
			}
			s.checkDetector()
		}
		s.check()
	}
}

// check verifies the invariants that hold after every step.
func (s *Sim) check() {
	if !s.started {
		return
	}
	cache := s.ix.cache()
	// Each handler's view, with the notifications waiting in its mailbox,
	// is the cache.
	for _, l := range s.ls {
		if l.st.removed.Load() || !s.ix.subscribed(l.st.id) || s.ix.compacting[l.st.id] {
			continue
		}
		objs := l.projected
		items, initial := s.held(l)
		if b, p := l.st.counters.Backlog(), l.st.counters.Pending(); b != int64(l.queuedItems+items) || p != int64(l.queuedInitialItems)+initial {
			s.failf("%s: backlog %d and pending %d, mailbox holds %d notifications, %d of an initial list; %d held, %d for initial ones", l.name, b, p, l.queuedItems, l.queuedInitialItems, items, initial)
		}
		if d := informertest.Diff(cache, objs); d != "" {
			s.failf("%s: view+mailbox differs from the cache: %s", l.name, d)
		}
		if l.st.coalesced() {
			// What the handler will have once it is given what is held
			// (in its runner's mailbox, then merged in the core) and
			// what its mailbox holds.
			if d := informertest.Diff(cache, s.heldView(l)); d != "" {
				s.failf("%s: view+held+mailbox differs from the cache: %s", l.name, d)
			}
		}
	}
	// Resource versions never go back.
	if rv := s.reflStatus.ResourceVersion; rv != "" {
		n, _ := strconv.ParseInt(rv, 10, 64)
		if n < s.lastReflRV {
			s.failf("reflector resource version went back from %d to %d", s.lastReflRV, n)
		}
		s.lastReflRV = max(s.lastReflRV, n)
	}
	if rv := s.ix.rv(); rv != "" {
		n, _ := strconv.ParseInt(rv, 10, 64)
		if n < s.lastCacheRV {
			s.failf("cache resource version went back from %d to %d", s.lastCacheRV, n)
		}
		s.lastCacheRV = max(s.lastCacheRV, n)
	}
	// HasSynced: not before the first list is in the cache (and so, by
	// the check above, in every listener).
	informerSynced := s.q.hasSynced()
	if informerSynced && !s.synced {
		s.synced = true
		if d := informertest.Diff(s.q.firstReplace, cache); d != "" {
			s.failf("HasSynced with the first list not in the cache: %s", d)
		}
		if rv := s.ix.rv(); rv != s.q.firstReplaceRV {
			s.failf("HasSynced with cache rv %q, first list's %q", rv, s.q.firstReplaceRV)
		}
	}
	for _, l := range s.ls {
		_, heldInitial := s.held(l)
		if !l.st.removed.Load() && l.st.regSynced(informerSynced) && (l.queuedInitial > 0 || heldInitial > 0) {
			s.failf("%s: registration HasSynced with initial notifications still queued", l.name)
		}
	}
}

// eachHeld calls f for each pending key a Coalesced handler's listener
// holds outside its mailbox: those given to its runner (in its mailbox),
// then those its core merges.
func (s *Sim) eachHeld(l *handlerState, f func(e *listener.PendingKey)) {
	l.st.eachHeld(f)
}

// held counts the notifications l holds outside its mailbox (see
// eachHeld), and the initial-list ones they stand for.
func (s *Sim) held(l *handlerState) (items int, initial int64) {
	s.eachHeld(l, func(e *listener.PendingKey) {
		items += len(e.Items())
		initial += e.Initial()
	})
	return items, initial
}

// heldView is l's view once its handler has had what l holds and what
// its mailbox holds, in order.
func (s *Sim) heldView(l *handlerState) map[string]string {
	out := maps.Clone(l.view.objs)
	apply := func(it *indexer.Notification) {
		k := informertest.Key(it.New)
		if it.Type == indexer.NotifyDelete {
			delete(out, k)
		} else {
			out[k] = rvOf(it.New)
		}
	}
	s.eachHeld(l, func(e *listener.PendingKey) {
		items := e.Items()
		for i := range items {
			apply(&items[i])
		}
	})
	l.st.mailboxItems(s.boxes[stage.ToListener(l.st.id)], apply)
	return out
}

// checkFinal verifies, at quiescence, that source, cache and every
// handler's view agree.
func (s *Sim) checkFinal() {
	src := s.srv.snapshot()
	cache := s.ix.cache()
	if d := informertest.Diff(src, cache); d != "" {
		s.failf("quiescent: cache differs from the source: %s", d)
	}
	if rv := s.ix.rv(); rv != s.srv.rvString() {
		s.failf("quiescent: cache rv %q, source's %q", rv, s.srv.rvString())
	}
	if !s.q.hasSynced() {
		s.failf("quiescent: not synced")
	}
	for _, l := range s.ls {
		if l.st.removed.Load() {
			continue
		}
		if d := informertest.Diff(src, l.view.objs); d != "" {
			s.failf("quiescent: %s's view differs from the source: %s", l.name, d)
		}
		if d := informertest.Diff(l.projected, l.view.objs); d != "" {
			s.failf("quiescent: %s's view differs from what it was sent: %s", l.name, d)
		}
		if !l.st.regSynced(true) {
			s.failf("quiescent: %s's registration not synced", l.name)
		}
	}
}

// view is what one handler believes the cache holds, checking the calls'
// consistency and per-key order as they come.
type view struct {
	s         *Sim
	name      string
	objs      map[string]string
	last      map[string]int64
	panicNext bool
	// mutateNext: the handler changes the object of its next call (the
	// cached object itself).
	mutateNext bool
	// uids is the UID of each object held; uidChanges counts, per key,
	// the updates sent to the handler that change the UID (after a relist
	// found the object recreated) and not yet made.
	uids       map[string]types.UID
	uidChanges map[string]int
	// expectInitial: an initial-list add of the key was sent to the
	// handler, and no delete since; its next add must have
	// isInInitialList (a Coalesced handler's merged add keeps it).
	expectInitial map[string]bool
}

func (v *view) removed() bool {
	l := v.s.listenerByName(v.name)
	return l != nil && l.st.removed.Load()
}

func newView(s *Sim, name string) *view {
	return &view{s: s, name: name, objs: map[string]string{}, last: map[string]int64{}, uids: map[string]types.UID{}, uidChanges: map[string]int{}, expectInitial: map[string]bool{}}
}

func (v *view) order(k, rv string) {
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		v.s.failf("%s: %s has rv %q", v.name, k, rv)
		return
	}
	if n < v.last[k] {
		v.s.failf("%s: %s at rv %d after rv %d", v.name, k, n, v.last[k])
	}
	v.last[k] = max(v.last[k], n)
}

func (v *view) call(line string, obj any) {
	if v.mutateNext {
		v.mutateNext = false
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if p, ok := obj.(*v1.Pod); ok {
			p.Labels = map[string]string{"changed": "by a handler"}
			line += " (changes it)"
		}
	}
	v.s.Calls = append(v.s.Calls, v.name+" "+line)
	if v.removed() {
		v.s.failf("%s: called after its removal: %s", v.name, line)
	}
	if v.panicNext {
		v.panicNext = false
		panic("sim: injected handler panic")
	}
}

func (v *view) OnAdd(_ context.Context, obj any, initial bool) {
	k, rv := informertest.Key(obj), rvOf(obj)
	if _, ok := v.objs[k]; ok {
		v.s.failf("%s: add of known key %s", v.name, k)
	}
	if !initial && v.expectInitial[k] {
		v.s.failf("%s: add of %s without isInInitialList, its initial-list add was sent", v.name, k)
	}
	delete(v.expectInitial, k)
	v.order(k, rv)
	v.objs[k] = rv
	v.uids[k] = uidOf(obj)
	line := "add " + k + " " + rv
	if initial {
		line += " initial"
	}
	v.call(line, obj)
}

func (v *view) OnUpdate(_ context.Context, old, obj any) {
	k, rv := informertest.Key(obj), rvOf(obj)
	if cur, ok := v.objs[k]; !ok {
		v.s.failf("%s: update of unknown key %s", v.name, k)
	} else if cur != rvOf(old) {
		v.s.failf("%s: update of %s from rv %s, handler had %s", v.name, k, rvOf(old), cur)
	}
	if u, ok := v.uids[k]; ok && u != uidOf(old) {
		v.s.failf("%s: update of %s from UID %s, handler had UID %s", v.name, k, uidOf(old), u)
	}
	if uidOf(old) != uidOf(obj) {
		// A recreated object is a delete then an add, unless the
		// indexer itself sent such an update.
		if v.uidChanges[k] == 0 {
			v.s.failf("%s: update of %s changes UID %s to %s (a recreated object must be a delete then an add)", v.name, k, uidOf(old), uidOf(obj))
		} else {
			v.uidChanges[k]--
		}
	}
	v.order(k, rv)
	v.objs[k] = rv
	v.uids[k] = uidOf(obj)
	v.call("update "+k+" "+rvOf(old)+"->"+rv, obj)
}

func (v *view) OnDelete(_ context.Context, obj any) {
	k, rv := informertest.Key(obj), rvOf(obj)
	if _, ok := v.objs[k]; !ok {
		v.s.failf("%s: delete of %s, which it does not hold (duplicate or unseen)", v.name, k)
	}
	if u, ok := v.uids[k]; ok && u != uidOf(obj) {
		v.s.failf("%s: delete of %s UID %s, handler had UID %s", v.name, k, uidOf(obj), u)
	}
	v.order(k, rv)
	delete(v.objs, k)
	delete(v.uids, k)
	line := "delete " + k + " " + rv
	if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		line += " tombstone"
	}
	v.call(line, obj)
}
