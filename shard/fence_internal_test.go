package shard

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/shardtest"
)

// effectRig is one incarnation's I/O side without its core: a test plays
// the core, calling the member's range effects (rangeEffect) on its own
// goroutine as the I/O actor would, and reads the reports the range
// goroutines send the actor. The group has one range; its informer lists
// ns/a at version 10 and its watch sends nothing unless the test does
// (watches), so it does not catch up with a record of a later version.
// The member's lease is in a fake clientset.
type effectRig struct {
	t       *testing.T
	s       *Informer
	inc     *incarnation
	io      *memberIO
	sys     *actor.ActorSystem
	cs      *fake.Clientset
	reports chan handover.Input
	lives   chan *handover.RangeLive       // RangeLive reports, apart
	pending atomic.Pointer[pendingRelease] // the last release kept
	watches chan *watch.FakeWatcher
	stopped sync.Once
}

func newEffectRig(t *testing.T, catchUp time.Duration) *effectRig {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	watches := make(chan *watch.FakeWatcher, 8)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (kruntime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "10"},
				Items: []corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "ua", ResourceVersion: "10"}}}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFake()
			select {
			case watches <- w:
			default:
			}
			return w, nil
		},
	}
	o := buildOptions([]Option{WithRanges(1)})
	o.catchUp = catchUp
	o.actorOpts = []actors.Option{actors.WithWatchList(false)} // the fake watch cannot stream a list
	cs := fake.NewClientset()
	shardtest.InstallLeases(cs)
	sh := &shared{group: "g", o: o, log: log, stoppedCh: make(chan struct{}), clock0: time.Now()}
	s := sh.newKind(lw, &corev1.ConfigMap{}, "")
	s.tel = newShardTelemetry(s)
	empty := []*rangeInformer{}
	s.delivered.Store(&empty)

	sys := actor.NewActorSystem()
	rig := &effectRig{t: t, s: s, sys: sys, cs: cs, reports: make(chan handover.Input, 16), lives: make(chan *handover.RangeLive, 16), watches: watches}
	id := handover.NewMemberID("node-a", "1")
	inc := &incarnation{s: s, c: &cluster.Cluster{ActorSystem: sys}, id: id, node: "node-a", log: log, done: make(chan struct{})}
	inc.ctx, inc.cancel = context.WithCancel(context.Background())
	inc.leases = newLeases(cs.CoordinationV1(), "default", "g", id, "addr", 15*time.Second, 10*time.Second)
	if _, err := inc.leases.write(inc.ctx, true); err != nil {
		t.Fatal(err)
	}
	inc.ioPID = sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if m, ok := c.Message().(*rangeDone); ok {
			if m.pending != nil {
				rig.pending.Store(m.pending)
			}
			if l, ok := m.report.(*handover.RangeLive); ok {
				rig.lives <- l
			} else {
				rig.reports <- m.report
			}
		}
	}))
	rig.inc = inc
	rig.io = &memberIO{inc: inc, ranges: map[int]*rangeInformer{}, movedTo: map[int]handover.MemberID{}}
	s.validUntil.Store(int64(time.Hour)) // the claim is valid
	t.Cleanup(rig.stop)
	return rig
}

// newLoggedRig is newEffectRig with a callLog handler added.
func newLoggedRig(t *testing.T, catchUp time.Duration) (*effectRig, *callLog) {
	t.Helper()
	rig := newEffectRig(t, catchUp)
	h := &callLog{}
	if _, err := rig.s.AddContextEventHandler(h); err != nil {
		t.Fatal(err)
	}
	return rig, h
}

// stop stops the range informers and the actor system.
func (r *effectRig) stop() {
	r.stopped.Do(func() {
		r.inc.cancel()
		r.sys.Shutdown()
	})
}

// start starts the range (epoch 1) and waits until its informer has
// synced.
func (r *effectRig) start() *rangeInformer {
	r.t.Helper()
	r.io.rangeEffect(&handover.StartRange{Range: 0, Epoch: 1})
	select {
	case in := <-r.reports:
		if _, ok := in.(*handover.RangeSynced); !ok {
			r.t.Fatalf("report %T, want RangeSynced", in)
		}
	case <-time.After(10 * time.Second):
		r.t.Fatal("the range's informer did not sync")
	}
	return r.io.ranges[0]
}

// activate activates the range under token 7, as a claim that found
// another member's release at version would.
func (r *effectRig) activate(version string) {
	v, _ := strconv.ParseInt(version, 10, 64)
	r.activateFrom(rangeRecord{token: 6, version: v, by: "node-b#1"})
}

// activateFrom activates the range under token 7, as a claim that found
// the record's final position rec would.
func (r *effectRig) activateFrom(rec rangeRecord) {
	r.io.finals = map[int]claimedFinal{0: {token: 7, rec: rec}}
	r.io.rangeEffect(&handover.ActivateRange{Range: 0, Epoch: 1, Token: 7})
}

// released reports whether the member's lease is marked released.
func (r *effectRig) released() bool {
	l, err := r.cs.CoordinationV1().Leases("default").Get(context.Background(), leaseName("g", r.inc.id), metav1.GetOptions{})
	if err != nil {
		r.t.Errorf("reading the lease: %v", err)
		return false
	}
	return l.Annotations[AnnotationReleased] != ""
}

// ended waits for the incarnation to end (its lease is released then).
func (r *effectRig) ended() {
	r.t.Helper()
	select {
	case <-r.inc.done:
	case <-time.After(10 * time.Second):
		r.t.Fatal("the fenced incarnation did not end")
	}
}

// callLog is a handler that records its calls, and the ownership calls,
// in order.
type callLog struct {
	mu    sync.Mutex
	calls []string
	// onDelete, if set, runs in OnDelete before it returns.
	onDelete func()
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *callLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func (l *callLog) OnAcquire(r Range, epoch uint64) { l.add("acquire") }
func (l *callLog) OnRelease(r Range)               { l.add("release") }
func (l *callLog) OnAdd(_ context.Context, obj any, _ bool) {
	l.add("add " + keyOf(obj) + "@" + versionOf(obj))
}
func (l *callLog) OnUpdate(_ context.Context, _, obj any) { l.add("update " + keyOf(obj)) }
func (l *callLog) OnDelete(_ context.Context, obj any) {
	l.add("delete " + keyOf(obj))
	if l.onDelete != nil {
		l.onDelete()
	}
}

func keyOf(obj any) string {
	k, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	return k
}

var _ actors.ContextEventHandler = (*callLog)(nil)

// plainHandler is a callLog without OnAcquire and OnRelease.
type plainHandler struct{ l *callLog }

func (p plainHandler) OnAdd(ctx context.Context, obj any, initial bool) { p.l.OnAdd(ctx, obj, initial) }
func (p plainHandler) OnUpdate(ctx context.Context, o, n any)           { p.l.OnUpdate(ctx, o, n) }
func (p plainHandler) OnDelete(ctx context.Context, obj any)            { p.l.OnDelete(ctx, obj) }

// A fence, or the member's stop, while a range's activation waits for
// its informer to catch up with the record's version: the activation gives up.
// Before, the fence ended the incarnation (its lease released), then the
// activation went on with the dropped range: OnAcquire with no OnRelease
// after it, the range published as delivered again, and the handoff's
// tombstones waiting in the gate until a claim was valid again (the next
// incarnation's, which the test plays by setting validUntil), then
// delivered on a range another member may own. In a testing/synctest
// bubble, as the other tests of the rig: the waits run on the bubble's
// clock, and the test fails if a goroutine it started is left blocked.
func TestFenceDuringActivation(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(rig *effectRig)
	}{{
		name: "fence",
		drop: func(rig *effectRig) {
			rig.io.rangeEffect(&handover.Fenced{Reason: "test"})
			rig.ended()
		},
	}, {
		name: "stop",
		drop: func(rig *effectRig) { rig.io.stop() },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rig, h := newLoggedRig(t, time.Hour)
				ri := rig.start()
				rig.activate("20") // the informer stays at 10
				eventually(t, "the activation did not start", func() bool {
					if ri.switching.TryLock() {
						ri.switching.Unlock()
						return false
					}
					return true
				})
				tc.drop(rig)
				// The next incarnation's claim.
				rig.s.validUntil.Store(int64(rig.s.now() + time.Hour))
				eventually(t, "the activation did not end", func() bool {
					if ri.switching.TryLock() {
						ri.switching.Unlock()
						return true
					}
					return false
				})
				if got := h.get(); len(got) != 0 {
					t.Errorf("calls after the range was dropped: %s; want none", strings.Join(got, ", "))
				}
				if d := *rig.s.delivered.Load(); len(d) != 0 {
					t.Errorf("%d ranges published as delivered after the range was dropped", len(d))
				}
				if ri.delivering.Load() {
					t.Error("the dropped range is delivering")
				}
				rig.stop()
				time.Sleep(time.Minute) // the actor system's dead-letter throttle
			})
		})
	}
}

// A fence while a tombstone call of a range's activation runs: the
// incarnation releases its lease (which lets the others take the range at
// once) only once that call has returned, and the handler hears OnRelease
// after it. Before, the release waited only for the handlers' listeners,
// not for the tombstone calls made from the range's goroutines; and a
// handler whose attachment the fence cut short heard OnAcquire with no
// OnRelease. (A late handoff, the other goroutine that made such calls,
// gives nothing now: the core no longer passes it to the shell.)
func TestFenceWaitsForTombstoneCalls(t *testing.T) {
	for _, tc := range []struct {
		name string
		// plain: the handler does not implement OwnershipHandler.
		plain bool
		want  []string
	}{{
		name: "ownership handler",
		want: []string{"acquire", "delete ns/a", "release"},
	}, {
		// An ownership handler would hide it: the fence's OnRelease waits
		// for the handler's lock.
		name:  "plain handler",
		plain: true,
		want:  []string{"delete ns/a"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rig := newEffectRig(t, time.Hour)
				entered, hold := make(chan struct{}), make(chan struct{})
				h := callLog{onDelete: func() {
					close(entered)
					<-hold
				}}
				var handler actors.ContextEventHandler = &h
				if tc.plain {
					handler = plainHandler{&h}
				}
				if _, err := rig.s.AddContextEventHandler(handler); err != nil {
					t.Fatal(err)
				}
				rig.start()
				// ns/a is deleted at 11, after the previous deliverer's
				// final position, 10: its handlers never saw it go.
				w := <-rig.watches
				w.Delete(cmAt("a", "ua", "11"))
				synctest.Wait() // the informer has it
				rig.activateFrom(rangeRecord{token: 6, position: 10, version: 10, by: "node-b#1"})
				<-entered
				rig.io.rangeEffect(&handover.Fenced{Reason: "test"})
				// The fence goes as far as it can while the call runs:
				// every goroutine of the member is then blocked (on the
				// call, or on its end) or done.
				synctest.Wait()
				if rig.released() {
					t.Error("the lease was released while a tombstone call ran")
				}
				close(hold)
				rig.ended()
				synctest.Wait() // the range's goroutines have ended too
				if !rig.released() {
					t.Error("the lease was not released")
				}
				if got := h.get(); !slices.Equal(got, tc.want) {
					t.Errorf("calls: %s; want %s", strings.Join(got, ", "), strings.Join(tc.want, ", "))
				}
				rig.stop()
				// The actor system's dead-letter throttle waits a second
				// on the bubble's clock before its goroutine ends.
				time.Sleep(time.Minute)
			})
		})
	}
}

// An activation whose range's informer has not reached the record's
// version when the catch-up timeout passes keeps waiting: it delivers
// nothing until the informer has caught up. Before, it delivered "from
// where it is" once the timeout passed: OnDelete tombstones for the
// handoff's objects the lagging cache lacked although they still
// existed (ns/b), and OnAdd with versions older than the previous
// deliverer's handlers had seen (ns/a at 10, after 18).
func TestActivationWaitsToCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const catchUp = time.Second
		rig, h := newLoggedRig(t, catchUp)
		rig.start()
		w := <-rig.watches
		// The previous deliverer's handlers saw ns/b created at 15 and
		// ns/a changed at 18; this member's watch has sent neither yet.
		rig.activate("18")
		time.Sleep(3 * catchUp) // the bubble's clock
		synctest.Wait()
		if got := h.get(); len(got) != 0 {
			t.Errorf("calls with the range's informer at 10, past the catch-up timeout: %s; want none", strings.Join(got, ", "))
		}
		w.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b", UID: "ub", ResourceVersion: "15"}})
		w.Modify(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "ua", ResourceVersion: "18"}})
		if in := <-rig.reports; in != nil {
			t.Fatalf("report %T, want the activation's", in)
		}
		synctest.Wait() // the handlers' initial lists
		got := h.get()
		if len(got) != 3 || got[0] != "acquire" || !slices.Equal(slices.Sorted(slices.Values(got[1:])), []string{"add ns/a@18", "add ns/b@15"}) {
			t.Errorf("calls once caught up: %s; want acquire, then add ns/a@18 and add ns/b@15", strings.Join(got, ", "))
		}
		rig.stop()
		time.Sleep(time.Minute) // the actor system's dead-letter throttle
	})
}

// An activation gives OnDelete for the objects deleted after the range's
// newest position, and for none deleted at or before it (the previous
// deliverer's handlers were given those): the final position in the
// range's record, as its claim found it, or the leases' when it is newer
// (a later deliverer had the range, and was lost).
// After the range synced at 10, its watch sent ns/b created at 11 and
// deleted at 12, ns/c created at 13 and deleted at 14. Before, a stale
// handoff gave tombstones from its Objects at versions older than the
// later deliverer's deletes (a 10-minute nemesis run, seed 22: 11
// versions back).
func TestActivationResumesFromTheNewestPosition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leases map[int]position
		record *rangeRecord      // the range's record
		heldBy handover.MemberID // a later deliverer's claim of it
		want   []string
		from   string // the previous deliverer the activation reports
	}{
		{name: "the record's position", record: &rangeRecord{token: 6, position: 12, version: 14, by: "node-b#1"},
			want: []string{"acquire", "delete ns/c", "add ns/a@10"}, from: "node-b#1"},
		{name: "a later deliverer's position in the leases", record: &rangeRecord{token: 6, position: 12, version: 14, by: "node-b#1"},
			heldBy: "node-c#1", leases: map[int]position{0: {token: 8, version: 14}}, want: []string{"acquire", "add ns/a@10"}, from: "node-c#1"},
		{name: "a later deliverer's claim, no position in the leases", record: &rangeRecord{token: 6, position: 12, version: 14, by: "node-b#1"},
			heldBy: "node-c#1", want: []string{"acquire", "delete ns/c", "add ns/a@10"}, from: "node-c#1"},
		{name: "an older position in the leases", record: &rangeRecord{token: 6, position: 12, version: 14},
			leases: map[int]position{0: {token: 5, version: 11}}, want: []string{"acquire", "delete ns/c", "add ns/a@10"}},
		{name: "no record, an older position in the leases", leases: map[int]position{0: {token: 5, version: 11}},
			want: []string{"acquire", "delete ns/b", "delete ns/c", "add ns/a@10"}},
		{name: "no record, the leases' position", leases: map[int]position{0: {token: 5, version: 12}},
			want: []string{"acquire", "delete ns/c", "add ns/a@10"}},
		{name: "an older record", record: &rangeRecord{token: 5, position: 11, version: 11},
			want: []string{"acquire", "delete ns/b", "delete ns/c", "add ns/a@10"}},
		{name: "a later deliverer's record", record: &rangeRecord{token: 8, position: 14, version: 14},
			want: []string{"acquire", "add ns/a@10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rig, h := newLoggedRig(t, time.Hour)
				rig.start()
				w := <-rig.watches
				w.Add(cmAt("b", "ub", "11"))
				w.Delete(cmAt("b", "ub", "12"))
				w.Add(cmAt("c", "uc", "13"))
				w.Delete(cmAt("c", "uc", "14"))
				synctest.Wait()
				rig.io.positions = kindPositions{"": tc.leases}
				if tc.record != nil {
					writeFinal(t, rig.inc.leases, 0, *tc.record)
				}
				gen := recordGen(tc.record)
				if tc.heldBy != "" {
					if res, _, err := rig.inc.leases.claimRecords(context.Background(), []handover.RecordClaim{{Range: 0, Gen: gen}}, tc.heldBy); err != nil || !res[0].OK {
						t.Fatalf("%s's claim: %+v, %v", tc.heldBy, res, err)
					}
					gen++
				}
				// The claim finds the record's final position, which the
				// activation under its token resumes from.
				res, finals, err := rig.inc.leases.claimRecords(context.Background(), []handover.RecordClaim{{Range: 0, Epoch: 1, Gen: gen}}, rig.inc.id)
				if err != nil || !res[0].OK {
					t.Fatalf("claim: %+v, %v", res, err)
				}
				rig.io.keepFinals(&claimed{finals: finals, in: &handover.RecordsClaimed{Results: res}})
				rig.io.rangeEffect(&handover.ActivateRange{Range: 0, Epoch: 1, Token: res[0].Token})
				if in := <-rig.reports; in != nil {
					t.Fatalf("report %T, want the activation's", in)
				}
				synctest.Wait() // the handlers' initial lists
				if got := h.get(); !slices.Equal(got, tc.want) {
					t.Errorf("calls: %s; want %s", strings.Join(got, ", "), strings.Join(tc.want, ", "))
				}
				rig.s.mu.Lock()
				hs := slices.Clone(rig.s.handovers)
				rig.s.mu.Unlock()
				if len(hs) != 1 || hs[0].From != tc.from {
					t.Errorf("handovers %+v; want one acquire from %q", hs, tc.from)
				}
				rig.stop()
				time.Sleep(time.Minute) // the actor system's dead-letter throttle
			})
		})
	}
}

// recordGen is the generation of range 0's record after writeFinal wrote
// rec (none when nil).
func recordGen(rec *rangeRecord) uint64 {
	if rec == nil {
		return 0
	}
	return 1
}
