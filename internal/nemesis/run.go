// Package nemesis runs sharded informer members (internal/shardmember) as
// processes on a real kube-apiserver, under a workload of creates, updates
// and deletes, injects faults (pauses, partitions, a cut from etcd or from
// the API server, an etcd restart, kills, graceful leaves, joins during
// deletes) and checks the shard package's promises over the whole run from
// every process's handler-call log (internal/calllog): see [Check].
//
// The members reach each other only through a [Net] of TCP proxies that
// the run can cut, and etcd and the API server through proxies of their
// own.
package nemesis

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/internal/calllog"
	"github.com/actorinformer/actorinformer/internal/shardproc"
	"github.com/actorinformer/actorinformer/internal/testcluster"
	"github.com/actorinformer/actorinformer/shard"
)

// Options configures a run.
type Options struct {
	// Bin is the member program (shardproc.Build's).
	Bin string
	// UpgradeBin, when set, is the member program the new members of a
	// Rolling fault run: a rolling update from Bin's version to its.
	UpgradeBin string
	// CrossVersion: Bin's and UpgradeBin's members refuse each other (their
	// protocol versions differ). The new members wait until the old ones
	// have left: the Rolling fault replaces them one by one without waiting
	// for a balance in between, and the ranges are unserved from the last
	// old member's leave to the new members' claims.
	CrossVersion bool
	// MemberArgs are added to every member's command line (after the
	// run's own flags): the member program's own settings, such as its
	// lease timings.
	MemberArgs []string
	// Members is how many members run (3); Ranges the group's range count
	// (16).
	Members, Ranges int
	// TTL is the etcd provider's keep-alive TTL (2 s).
	TTL time.Duration
	// Objects is the population the workload starts with and steers
	// towards (300); Rate its writes per second (100).
	Objects, Rate int
	// Hold is how long a pause, a partition or a cut from etcd lasts, and
	// how long etcd stays down in a restart (8 s).
	Hold time.Duration
	// Burst is how long the deletes of a join during deletes last (4 s).
	Burst time.Duration
	// After is how long the workload goes on after a fault has healed
	// (2 s); then it pauses while the members settle, for at most
	// Recover (30 s).
	After, Recover time.Duration
	// HandlerDelay is how long each member's handler call takes
	// (-handler-delay): a handler with work to do has a queue, which a
	// handover must not lose.
	HandlerDelay time.Duration
	// Seed seeds the workload and the choices of a long run.
	Seed int64
	// Kinds is 1 (ConfigMaps in the group's namespace) or 2: the group,
	// hashed by namespace, carries ConfigMaps and Secrets (OwnedKind,
	// AddKind's), which the workload spreads over NamespacesPerRange
	// namespaces per range; the checker checks each kind, and that a
	// range's kinds are delivered together (VKindsApart).
	Kinds int
}

// NamespacesPerRange is how many namespaces of a two-kind run fall in
// each range.
const NamespacesPerRange = 3

func (o *Options) defaults() {
	if o.Members <= 0 {
		o.Members = 3
	}
	if o.Ranges <= 0 {
		o.Ranges = 16
	}
	if o.TTL <= 0 {
		o.TTL = 2 * time.Second
	}
	if o.Objects <= 0 {
		o.Objects = 300
	}
	if o.Rate <= 0 {
		o.Rate = 100
	}
	if o.Hold <= 0 {
		o.Hold = 8 * time.Second
	}
	if o.Burst <= 0 {
		o.Burst = 4 * time.Second
	}
	if o.After <= 0 {
		o.After = 2 * time.Second
	}
	if o.Recover <= 0 {
		o.Recover = 30 * time.Second
	}
	if o.Kinds <= 0 {
		o.Kinds = 1
	}
}

// Member is one member process of a run.
type Member struct {
	Name string
	proc *shardproc.Proc
	src  string
	link *Link // in front of its remote port
	etcd *Link // its way to etcd
	api  *Link // its way to the API server

	mu     sync.Mutex
	frozen []Interval
	killed int64 // when it was killed
	gone   bool  // killed or left
}

// Run is one nemesis run: a group of members in a namespace of their own.
type Run struct {
	t  testing.TB
	c  *testcluster.Cluster
	cs kubernetes.Interface
	o  Options
	ns string
	// namespaces hold a two-kind run's objects (nil for one kind: ns).
	namespaces []string
	pfx        string
	net        *Net
	wl         *workload
	logf       func(format string, args ...any)

	mu      sync.Mutex
	members []*Member
	links   []*Link
	faults  []Fault
	serving []int64 // per fault: when its target served again
	seq     int
	begin   int64
	last    []Final // the last states read
	settled string  // the last settle check's verdict
	written bool    // writes since the last settle check
}

// NewRun creates namespace ns with o.Objects ConfigMaps (with two kinds,
// also the namespaces of the objects, ConfigMaps and Secrets spread over
// them); members join with Join.
func NewRun(t testing.TB, c *testcluster.Cluster, ns string, o Options) *Run {
	t.Helper()
	o.defaults()
	if o.Kinds > 2 {
		t.Fatalf("nemesis: %d kinds; want 1 or 2", o.Kinds)
	}
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	r := &Run{t: t, c: c, cs: cs, o: o, ns: ns, pfx: fmt.Sprintf("/actorinformer-nemesis/%s-%d", ns, time.Now().UnixNano()),
		net: NewNet(), logf: t.Logf}
	if o.Kinds > 1 {
		r.namespaces = SpreadNamespaces(ns, o.Ranges, NamespacesPerRange)
	}
	r.wl = newWorkload(cs, ns, r.namespaces, o.Kinds, o.Rate, o.Objects, o.Seed)
	t.Cleanup(r.close)
	ctx := context.Background()
	for _, name := range append([]string{ns}, r.namespaces...) {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.wl.populate(ctx, o.Objects); err != nil {
		t.Fatal(err)
	}
	return r
}

// SpreadNamespaces names perRange namespaces in each of ranges ranges
// (hashed as shard hashes by namespace): ns-0, ns-1, ..., skipping those
// whose range has enough.
func SpreadNamespaces(ns string, ranges, perRange int) []string {
	count := make([]int, ranges)
	var out []string
	for i := 0; len(out) < ranges*perRange; i++ {
		name := fmt.Sprintf("%s-%d", ns, i)
		h := shard.Hash(name)
		for rg := range ranges {
			if (shard.Range{Index: rg, Count: ranges}).Contains(h) {
				if count[rg] < perRange {
					count[rg]++
					out = append(out, name)
				}
				break
			}
		}
	}
	return out
}

func (r *Run) close() {
	r.wl.halt()
	r.mu.Lock()
	links := slices.Clone(r.links)
	r.mu.Unlock()
	for _, l := range links {
		l.Close()
	}
}

func (r *Run) etcdAddr() string { return strings.TrimPrefix(r.c.EtcdURL(), "http://") }

// Join starts a member.
func (r *Run) Join() *Member {
	r.t.Helper()
	return r.joinWith(r.o.Bin)
}

// joinWith starts a member running the program bin.
func (r *Run) joinWith(bin string) *Member { return r.joinAs(bin, false) }

// joinAs starts a member running the program bin; deaf, one that no
// member can dial (Net.Deafen) from its start.
func (r *Run) joinAs(bin string, deaf bool) *Member {
	r.t.Helper()
	r.mu.Lock()
	r.seq++
	seq := r.seq
	r.mu.Unlock()
	name := fmt.Sprintf("m%d", seq)
	m := &Member{Name: name, src: fmt.Sprintf("127.0.%d.%d", 1+seq/250, 1+seq%250)}
	var err error
	if m.etcd, err = r.net.EtcdLink(name, r.etcdAddr()); err != nil {
		r.t.Fatal(err)
	}
	if m.api, err = r.net.APILink(name, r.c.APIServerAddr()); err != nil {
		r.t.Fatal(err)
	}
	r.mu.Lock()
	r.links = append(r.links, m.etcd, m.api)
	r.mu.Unlock()
	r.net.Source(m.src, name)
	if deaf {
		r.net.Deafen(name)
	}
	// The member listens on a port chosen here, behind its link. Another
	// socket on the machine may take the port between its choice and the
	// member's listen: the member then starts again on another.
	for attempt := 1; ; attempt++ {
		port, hold, err := reservePort()
		if err != nil {
			r.t.Fatal(err)
		}
		// The link's own port cannot be the member's while it is held.
		m.link, err = r.net.MemberLink(name, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		hold.Close()
		if err != nil {
			r.t.Fatal(err)
		}
		// The leases live in the group's namespace: the groups of a short
		// run share an API server, and each must see only its own.
		// With two kinds, the members watch every namespace, the group's
		// objects by their label.
		objNS := r.ns
		if r.o.Kinds > 1 {
			objNS = ""
		}
		args := []string{"-host", "https://" + m.api.Addr(), "-token", r.c.AdminToken(), "-namespace", objNS, "-lease-namespace", r.ns, "-mode", "sharded",
			"-etcd", "http://" + m.etcd.Addr(), "-etcd-prefix", r.pfx, "-etcd-ttl", r.o.TTL.String(),
			"-ranges", strconv.Itoa(r.o.Ranges), "-remote-port", strconv.Itoa(port), "-advertise", m.link.Addr(),
			"-dial-source", m.src, "-handler-delay", r.o.HandlerDelay.String()}
		if r.o.Kinds > 1 {
			// Secrets beside the ConfigMaps, hashed by namespace.
			args = append(args, "-selector", GroupLabel+"="+r.ns, "-owned", OwnedKind)
		}
		p, log := shardproc.TryStart(r.t, bin, name, append(args, r.o.MemberArgs...)...)
		if p != nil {
			m.proc = p
			break
		}
		m.link.Close()
		if attempt == 3 || !strings.Contains(log, "address already in use") {
			r.t.Fatalf("%s exited at start:\n%s", name, log)
		}
		r.t.Logf("%s: port %d was taken before it listened; starting it again on another", name, port)
	}
	r.mu.Lock()
	r.links = append(r.links, m.link)
	r.members = append(r.members, m)
	r.mu.Unlock()
	return m
}

// reservePort returns a free loopback port and the listener that holds
// it; the caller closes it just before the port is used.
func reservePort() (int, net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, nil, err
	}
	return l.Addr().(*net.TCPAddr).Port, l, nil
}

// Live returns the members that were not killed, did not leave and did
// not crash.
func (r *Run) Live() []*Member {
	r.reap()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Member
	for _, m := range r.members {
		m.mu.Lock()
		gone := m.gone
		m.mu.Unlock()
		if !gone {
			out = append(out, m)
		}
	}
	return out
}

// reap records a Crash for each member that is neither killed nor gone
// and whose process died of protoactor's etcd provider race, as a
// supervisor would see it; from then on it counts as killed when it
// exited. A member that died of anything else stays: the checker reports
// it (VEndState).
func (r *Run) reap() {
	r.mu.Lock()
	ms := slices.Clone(r.members)
	r.mu.Unlock()
	for _, m := range ms {
		at := m.proc.Exited()
		if at.IsZero() {
			continue
		}
		m.mu.Lock()
		gone := m.gone
		m.mu.Unlock()
		if gone {
			continue
		}
		log := shardproc.ExitLog(m.proc.Log)
		if !shardproc.ProviderRace(log) {
			continue
		}
		m.mu.Lock()
		fresh := !m.gone // not recorded by another look meanwhile
		if fresh {
			m.gone, m.killed = true, at.UnixNano()
		}
		m.mu.Unlock()
		if !fresh {
			continue
		}
		r.record(Fault{Kind: Crash, Target: m.Name, Start: at.UnixNano(), End: at.UnixNano()})
		r.logf("nemesis: %s died of protoactor's etcd provider race; checked as a crash from its exit:\n%s", m.Name, log)
	}
}

func (r *Run) record(f Fault) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, f)
	r.serving = append(r.serving, 0)
	return len(r.faults) - 1
}

func (r *Run) ended(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults[i].End = time.Now().UnixNano()
}

// Ongoing is a fault in progress.
type Ongoing struct {
	r      *Run
	i      int
	kind   Kind
	target string
	start  time.Time
	// until is when Inject heals it.
	until time.Time
	heal  func()
	done  bool
	// the network's counts at the start
	held, reset int64
}

// Start injects a fault of kind k on target (ignored by an etcd restart
// and a join, which starts a member) and returns it in progress: a pause,
// a partition, a cut from etcd or etcd's downtime lasts until Heal; a
// join during deletes goes on for Burst. A kill, a leave or a join is done
// when Start returns. Faults may overlap: a join during a partition moves
// ranges while a member is cut off.
func (r *Run) Start(k Kind, target *Member) *Ongoing {
	r.t.Helper()
	now := time.Now()
	o := &Ongoing{r: r, kind: k, start: now, until: now, heal: func() {}}
	o.held, o.reset = r.net.Counts()
	if target != nil {
		o.target = target.Name
	}
	f := Fault{Kind: k, Target: o.target, Start: now.UnixNano()}
	switch k {
	case Pause, LeaseDelete:
		o.i = r.record(f)
		_, heal, err := r.freeze(target, func(err error) { r.t.Fatal(err) })
		if err != nil {
			r.t.Fatal(err)
		}
		o.until = now.Add(r.o.Hold)
		if k == LeaseDelete {
			if err := r.deleteLease(target); err != nil {
				r.t.Fatal(err)
			}
			o.until = now.Add(LeaseDeleteHold)
		}
		o.heal = heal
	case Partition, PartitionReject:
		mode := Drop
		if k == PartitionReject {
			mode = Reject
		}
		o.i = r.record(f)
		r.net.Isolate(mode, o.target)
		o.until = now.Add(r.o.Hold)
		o.heal = func() { r.net.Heal(o.target) }
	case EtcdCut, APICut:
		o.i = r.record(f)
		to := EtcdEndpoint
		if k == APICut {
			to = APIEndpoint
		}
		r.net.Cut(Drop, o.target, to)
		o.until = now.Add(r.o.Hold)
		o.heal = func() { r.net.Heal(o.target) }
	case EtcdRestart:
		o.i = r.record(f)
		r.c.StopEtcd(r.t)
		o.until = now.Add(r.o.Hold)
		o.heal = func() { r.c.StartEtcd(r.t) }
	case Kill:
		f.End = f.Start
		o.i = r.record(f)
		target.mu.Lock()
		target.gone, target.killed = true, f.Start
		target.mu.Unlock()
		target.proc.Kill()
	case Leave:
		f.End = f.Start
		o.i = r.record(f)
		target.leave()
	case LeavePause:
		o.i = r.record(f)
		target.leave()
		time.Sleep(time.Duration(r.draw(o.i).Int63n(int64(LeavePauseSpread))))
		stopped, heal, err := r.freeze(target, func(err error) { r.logf("nemesis: leave-pause: resuming %s: %v", target.Name, err) })
		if err != nil {
			// It left before the freeze: a plain leave.
			r.logf("nemesis: leave-pause: %s exited before its freeze: %v", target.Name, err)
			break
		}
		r.logf("nemesis: leave-pause: %s frozen %v after its SIGTERM", target.Name, stopped.Sub(now).Round(time.Millisecond))
		o.until = now.Add(r.o.Hold)
		o.heal = heal
	case LeaveCut:
		o.i = r.record(f)
		target.leave()
		time.Sleep(time.Duration(r.draw(o.i).Int63n(int64(LeavePauseSpread))))
		r.net.Mute(target.Name)
		r.logf("nemesis: leave-cut: %s's bytes to the members held from %v after its SIGTERM", target.Name, time.Since(now).Round(time.Millisecond))
		o.until = now.Add(max(r.o.Hold, LeaveCutHold))
		o.heal = func() { r.net.Heal(target.Name) }
	case Join, JoinDuringDeletes:
		o.i = r.record(f)
		if k == JoinDuringDeletes {
			r.wl.burst(r.o.Burst, r.o.Objects/4)
			o.until = now.Add(r.o.Burst)
		}
		m := r.Join()
		r.retarget(o, m.Name)
	case OneWayCut:
		o.i = r.record(f)
		r.net.Mute(target.Name)
		o.until = now.Add(r.o.Hold)
		o.heal = func() { r.net.Heal(target.Name) }
	case BadAddress:
		o.i = r.record(f)
		m := r.joinAs(r.o.Bin, true)
		r.retarget(o, m.Name)
		o.until = now.Add(r.o.Hold)
		o.heal = func() { r.net.Heal(m.Name) }
	case Flap:
		o.i = r.record(f)
		m := r.Join()
		r.retarget(o, m.Name)
		after := FlapAfter + time.Duration(r.draw(o.i).Int63n(int64(FlapSpread)))
		time.Sleep(time.Until(m.proc.Start.Add(after)))
		serving := "?"
		if st, err := m.proc.State(false); err == nil {
			serving = fmt.Sprint(st.Ranges)
		}
		r.logf("nemesis: flap: %s gets SIGTERM %v after its start, serving ranges %s", m.Name, time.Since(m.proc.Start).Round(time.Millisecond), serving)
		m.leave()
	case Rolling:
		o.i = r.record(f)
		bin := r.o.Bin
		if r.o.UpgradeBin != "" {
			bin = r.o.UpgradeBin
		}
		for _, old := range r.Live() {
			m := r.joinWith(bin)
			if r.o.CrossVersion {
				old.leave()
				continue
			}
			if took, why := r.balance(r.o.Recover); why != "" {
				r.logf("nemesis: rolling: not balanced %v after %s joined: %s", took.Round(time.Millisecond), m.Name, why)
			}
			old.leave()
			if took, why := r.balance(r.o.Recover); why != "" {
				r.logf("nemesis: rolling: not balanced %v after %s left: %s", took.Round(time.Millisecond), old.Name, why)
			}
		}
		r.retarget(o, "all")
	default:
		r.t.Fatalf("nemesis: unknown fault %q", k)
	}
	if o.until.Equal(now) {
		o.Heal()
	}
	return o
}

// freeze stops m with SIGSTOP and returns once every thread is seen
// stopped, the freeze's start (a handler call that began between the
// fault's start and the signal's arrival was not frozen before it began),
// with the heal that resumes m (SIGCONT; resumeFailed gets its error) and
// records the freeze.
func (r *Run) freeze(m *Member, resumeFailed func(error)) (stopped time.Time, heal func(), err error) {
	if err := m.proc.Signal(syscall.SIGSTOP); err != nil {
		return time.Time{}, nil, err
	}
	stopped = waitStopped(m.proc.Pid(), time.Second)
	return stopped, func() {
		if err := m.proc.Signal(syscall.SIGCONT); err != nil {
			resumeFailed(err)
		}
		m.mu.Lock()
		m.frozen = append(m.frozen, Interval{stopped.UnixNano(), time.Now().UnixNano()})
		m.mu.Unlock()
	}, nil
}

// draw is fault i's random source: each group (namespace) and fault
// draws its own delay.
func (r *Run) draw(i int) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(r.ns))
	return rand.New(rand.NewSource(r.o.Seed ^ int64(h.Sum64()) + int64(i)))
}

// deleteLease deletes m's live lease (the one holding m's address), with
// no precondition, as someone outside the group would.
func (r *Run) deleteLease(m *Member) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	api := r.cs.CoordinationV1().Leases(r.ns)
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: shard.LabelGroup})
	if err != nil {
		return err
	}
	for _, l := range list.Items {
		if l.Annotations[shard.AnnotationAddress] == m.link.Addr() && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			r.logf("nemesis: deleting %s's lease %s (holder %s, version %s)", m.Name, l.Name, *l.Spec.HolderIdentity, l.ResourceVersion)
			return api.Delete(ctx, l.Name, metav1.DeleteOptions{})
		}
	}
	return fmt.Errorf("no live lease of %s (address %s) among %d", m.Name, m.link.Addr(), len(list.Items))
}

// Heal ends the fault (at once, whatever its duration).
func (o *Ongoing) Heal() {
	o.r.t.Helper()
	if o.done {
		return
	}
	o.done = true
	o.heal()
	o.r.ended(o.i)
	cut := ""
	if held, reset := o.r.net.Counts(); held != o.held || reset != o.reset {
		cut = fmt.Sprintf(" (the network held %d chunks, reset or refused %d connections)", held-o.held, reset-o.reset)
	}
	o.r.logf("nemesis: %s %s at %s, for %v%s", o.kind, o.target, fmtTime(o.start.UnixNano()), time.Since(o.start).Round(time.Millisecond), cut)
}

// Wait heals the fault once it has lasted as long as it should.
func (o *Ongoing) Wait() {
	o.r.t.Helper()
	time.Sleep(time.Until(o.until))
	o.Heal()
}

// retarget names the fault's target once it is known: a joiner, or "all".
func (r *Run) retarget(o *Ongoing, name string) {
	o.target = name
	r.mu.Lock()
	r.faults[o.i].Target = name
	r.mu.Unlock()
}

// leave marks m gone and sends it SIGTERM: it leaves the group gracefully.
func (m *Member) leave() {
	m.mu.Lock()
	m.gone = true
	m.mu.Unlock()
	m.proc.Terminate()
}

// Inject injects a fault and returns once it has healed: Start, then Wait.
func (r *Run) Inject(k Kind, target *Member) {
	r.t.Helper()
	r.Start(k, target).Wait()
}

// StartWorkload starts (or resumes) the writes.
func (r *Run) StartWorkload() {
	r.mu.Lock()
	r.written = true
	r.mu.Unlock()
	r.wl.start()
}

// StopWorkload pauses the writes.
func (r *Run) StopWorkload() { r.wl.halt() }

// poll reads the server's objects and the live members' states, notes
// which fenced targets serve again, and returns EndState's verdict.
func (r *Run) poll() string {
	server, err := r.serverObjects()
	if err != nil {
		return err.Error()
	}
	live := r.Live()
	finals := make([]Final, len(live))
	var wg sync.WaitGroup
	for i, m := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			finals[i].Name = m.Name
			st, err := m.proc.State(true)
			if err != nil {
				finals[i].Err = err.Error()
			}
			finals[i].State = st
		}()
	}
	wg.Wait()
	now := time.Now().UnixNano()
	in := Input{Ranges: r.o.Ranges, Final: finals}
	byName := map[string]Final{}
	for _, f := range finals {
		byName[f.Name] = f
	}
	waiting := ""
	r.mu.Lock()
	for i, f := range r.faults {
		if !f.Kind.fences() || f.End == 0 || r.serving[i] != 0 {
			continue
		}
		names := []string{f.Target}
		if f.Kind == EtcdRestart {
			names = names[:0]
			for _, m := range live {
				names = append(names, m.Name)
			}
		}
		ok := true
		for _, n := range names {
			if _, alive := byName[n]; alive {
				if why := notServing(in, byName, n); why != "" {
					ok = false
					waiting = fmt.Sprintf("%s, %s's target, not serving again yet: %s", n, f.Kind, why)
				}
			}
		}
		if ok {
			r.serving[i] = now
		}
	}
	r.last = finals
	r.mu.Unlock()
	if why := EndState(r.o.Ranges, server, finals); why != "" {
		return why
	}
	// Settled also means that a member a fault may have fenced serves
	// again: it rejoins by itself.
	return waiting
}

// serverObjects lists the group's objects on the server, by the
// checker's keys (ObjectKey).
func (r *Run) serverObjects() (map[string]Object, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ns, opts := r.ns, metav1.ListOptions{}
	if r.o.Kinds > 1 {
		ns, opts.LabelSelector = "", GroupLabel+"="+r.ns
	}
	list, err := r.cs.CoreV1().ConfigMaps(ns).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Object, len(list.Items))
	for _, cm := range list.Items {
		out[cm.Namespace+"/"+cm.Name] = Object{UID: string(cm.UID), RV: cm.ResourceVersion}
	}
	if r.o.Kinds > 1 {
		secrets, err := r.cs.CoreV1().Secrets(ns).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, s := range secrets.Items {
			out[ObjectKey(OwnedKind, s.Namespace+"/"+s.Name)] = Object{UID: string(s.UID), RV: s.ResourceVersion}
		}
	}
	return out, nil
}

// Settle waits up to timeout for the members to settle (EndState ""),
// and returns how long it took and the last verdict ("" once settled).
func (r *Run) Settle(timeout time.Duration) (time.Duration, string) {
	start := time.Now()
	why := ""
	for {
		if why = r.poll(); why == "" || time.Since(start) >= timeout {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.mu.Lock()
	r.settled = why
	r.written = r.wl.running
	r.mu.Unlock()
	return time.Since(start), why
}

// balance waits, writes going on, until the live members agree on the
// view, every range is delivered by one of them and each delivers some:
// a rolling update's next step may start.
func (r *Run) balance(timeout time.Duration) (time.Duration, string) {
	start := time.Now()
	for {
		why := ""
		owner := map[int]string{}
		var view []string
		for i, m := range r.Live() {
			st, err := m.proc.State(false)
			switch {
			case err != nil:
				why = m.Name + ": " + err.Error()
			case !st.Synced || len(st.Ranges) == 0:
				why = m.Name + " delivers no range yet"
			case i > 0 && !slices.Equal(view, st.View):
				why = "views differ"
			}
			if why != "" {
				break
			}
			view = st.View
			for _, rg := range st.Ranges {
				owner[rg] = m.Name
			}
		}
		if why == "" && len(owner) != r.o.Ranges {
			why = fmt.Sprintf("%d of %d ranges delivered", len(owner), r.o.Ranges)
		}
		if why == "" || time.Since(start) >= timeout {
			return time.Since(start), why
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Begin waits for the first settle (every range delivered once); the
// checker's gaps count from then. It fails the test if the members do not
// settle within Recover.
func (r *Run) Begin() {
	r.t.Helper()
	took, why := r.Settle(r.o.Recover)
	if why != "" {
		r.t.Fatalf("nemesis: the members did not settle at the start within %v: %s\n%s", r.o.Recover, why, r.logs())
	}
	r.begin = time.Now().UnixNano()
	r.logf("nemesis: %d members settled in %v", len(r.Live()), took.Round(time.Millisecond))
}

// Recover lets the workload run for After, pauses it and waits for the
// members to settle; it logs how long that took, or why they did not.
func (r *Run) Recover() {
	// Polled meanwhile: when a fenced member serves again.
	for until := time.Now().Add(r.o.After); time.Now().Before(until); time.Sleep(200 * time.Millisecond) {
		r.poll()
	}
	r.StopWorkload()
	took, why := r.Settle(r.o.Recover)
	if why != "" {
		r.logf("nemesis: not settled %v after the writes paused: %s", took.Round(time.Millisecond), why)
	} else {
		r.logf("nemesis: settled %v after the writes paused", took.Round(time.Millisecond))
	}
}

// Check stops the writes, waits for the members to settle (at most
// Recover), and checks the whole run.
func (r *Run) Check() *Result {
	r.StopWorkload()
	r.mu.Lock()
	again := r.written || r.last == nil
	r.mu.Unlock()
	if again {
		r.Settle(r.o.Recover)
	}
	end := time.Now().UnixNano()
	server, err := r.serverObjects()
	if err != nil {
		r.t.Fatalf("nemesis: listing the server's objects: %v", err)
	}
	in := Input{Ranges: r.o.Ranges, Server: server, Begin: r.begin, End: end,
		Deletes: r.wl.recordedDeletes()}
	r.reap()
	r.mu.Lock()
	in.Faults, in.ServingAgain = faultsByStart(r.faults, r.serving)
	in.Final = slices.Clone(r.last)
	members := slices.Clone(r.members)
	r.mu.Unlock()
	for _, m := range members {
		recs, torn, err := calllog.Read(m.proc.Calls)
		if err != nil && !os.IsNotExist(err) {
			r.t.Errorf("nemesis: %s's call log: %v", m.Name, err)
		}
		p := Proc{Name: m.Name, Calls: recs, Torn: torn}
		if log, err := os.ReadFile(m.proc.Log); err == nil {
			p.Fences = FenceReasons(string(log))
			p.Events = LogEvents(string(log), time.Unix(0, r.begin).Year())
		}
		m.mu.Lock()
		p.Frozen = slices.Clone(m.frozen)
		p.Exited = m.killed
		m.mu.Unlock()
		if p.Exited == 0 {
			if at := m.proc.Exited(); !at.IsZero() {
				p.Exited = at.UnixNano()
			}
		}
		in.Procs = append(in.Procs, p)
	}
	res := Check(in)
	r.logf("nemesis: %d writes (%d failed), %d deletes recorded, %d handler calls checked", r.wl.ops.Load(), r.wl.failed.Load(), len(in.Deletes), res.Calls)
	return res
}

// faultsByStart returns copies of faults and their serving times, ordered by
// the faults' starts: a crash is recorded when it is seen, after faults
// that may have begun since.
func faultsByStart(faults []Fault, serving []int64) ([]Fault, []int64) {
	idx := make([]int, len(faults))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(faults[a].Start, faults[b].Start) })
	fs, ss := make([]Fault, len(idx)), make([]int64, len(idx))
	for i, j := range idx {
		fs[i], ss[i] = faults[j], serving[j]
	}
	return fs, ss
}

// Stop kills the live members (after the check: their logs are read).
func (r *Run) Stop() {
	for _, m := range r.Live() {
		m.mu.Lock()
		m.gone = true
		m.mu.Unlock()
		m.proc.Kill()
	}
}

// logs returns the last lines of every member's stderr.
func (r *Run) logs() string {
	r.mu.Lock()
	ms := slices.Clone(r.members)
	r.mu.Unlock()
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "--- %s:\n%s\n", m.Name, shardproc.Tail(m.proc.Log, 30))
	}
	return b.String()
}

// Logs returns the last lines of every member's stderr.
func (r *Run) Logs() string { return r.logs() }

// LogsAbout returns, from every member's stderr (all its incarnations),
// the lines about one of ranges (their range="i/n"
// attribute), at most max per member: a violation's story, which the last
// lines seldom hold.
func (r *Run) LogsAbout(ranges []int, max int) string {
	return r.logsWhere(func(l string) bool {
		for _, i := range ranges {
			if strings.Contains(l, fmt.Sprintf("range=\"%d/", i)) {
				return true
			}
		}
		return false
	}, max)
}

// LogsMatching returns, from every member's stderr (all its
// incarnations), the lines that contain substr, at most max per member.
func (r *Run) LogsMatching(substr string, max int) string {
	return r.logsWhere(func(l string) bool { return strings.Contains(l, substr) }, max)
}

// logsWhere returns, from every member's stderr (all its incarnations),
// the lines keep takes, the last max per member.
func (r *Run) logsWhere(keep func(string) bool, max int) string {
	r.mu.Lock()
	ms := slices.Clone(r.members)
	r.mu.Unlock()
	var b strings.Builder
	for _, m := range ms {
		data, _ := os.ReadFile(m.proc.Log)
		var lines []string
		for _, l := range strings.Split(string(data), "\n") {
			if keep(l) {
				lines = append(lines, l)
			}
		}
		if len(lines) > max {
			lines = append([]string{fmt.Sprintf("(%d earlier lines left out)", len(lines)-max)}, lines[len(lines)-max:]...)
		}
		fmt.Fprintf(&b, "--- %s:\n%s\n", m.Name, strings.Join(lines, "\n"))
	}
	return b.String()
}

// waitStopped waits until every thread of process pid is stopped (state T
// in /proc), for at most max, and returns when it saw that (the time it
// gave up otherwise).
func waitStopped(pid int, max time.Duration) time.Time {
	deadline := time.Now().Add(max)
	for {
		if allStopped(pid) || time.Now().After(deadline) {
			return time.Now()
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// allStopped reports whether /proc shows every thread of pid stopped.
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}
