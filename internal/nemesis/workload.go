package nemesis

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// workload creates, updates and deletes ConfigMaps of one namespace at a
// steady rate, and records every delete (by UID, with a UID
// precondition). Created names are never reused, so a key is one object.
// With two kinds it spreads ConfigMaps and Secrets, half and half, over
// namespaces (each of its objects labelled GroupLabel=ns, so that the
// group's members list only its own).
type workload struct {
	cs      kubernetes.Interface
	ns      string
	rate    int // writes per second, all workers together
	workers int
	target  int // the population it steers towards
	// namespaces the objects go to (ns alone for one kind); kinds, 1 or 2
	// (Secrets beside the ConfigMaps).
	namespaces []string
	kinds      int

	mu      sync.Mutex
	live    []objRef
	uids    map[objRef]types.UID
	index   map[objRef]int // → index in live
	deletes []Delete
	seq     int
	rnd     *rand.Rand

	burstUntil atomic.Int64 // Unix ns: only deletes until then
	burstFloor int

	ops, failed atomic.Int64
	running     bool
	stop        chan struct{}
	wg          sync.WaitGroup
}

const workers = 4

// GroupLabel labels a two-kind run's objects with their group's
// namespace (the members' -selector).
const GroupLabel = "nemesis-group"

// OwnedKind is the second kind of a two-kind run (AddKind's resource,
// the call log's KIND).
const OwnedKind = "secrets"

// objRef is one object of the workload: its kind ("" for a ConfigMap,
// OwnedKind for a Secret), namespace and name.
type objRef struct{ kind, ns, name string }

// key is the object's key for the checker (ObjectKey).
func (o objRef) key() string { return ObjectKey(o.kind, o.ns+"/"+o.name) }

// ObjectKey is the checker's key of an object of kind: namespace/name for
// the group's first kind (""), kind:namespace/name for another, as the
// member's state page gives them.
func ObjectKey(kind, key string) string {
	if kind == "" {
		return key
	}
	return kind + ":" + key
}

func newWorkload(cs kubernetes.Interface, ns string, namespaces []string, kinds, rate, target int, seed int64) *workload {
	if len(namespaces) == 0 {
		namespaces = []string{ns}
	}
	return &workload{cs: cs, ns: ns, namespaces: namespaces, kinds: max(kinds, 1), rate: max(rate, 1), workers: workers, target: target,
		uids: map[objRef]types.UID{}, index: map[objRef]int{}, rnd: rand.New(rand.NewSource(seed))}
}

// populate creates n objects.
func (w *workload) populate(ctx context.Context, n int) error {
	for range n {
		if err := w.create(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (w *workload) addLive(o objRef, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.index[o] = len(w.live)
	w.live = append(w.live, o)
	w.uids[o] = uid
}

// take removes a random live object (for a delete), or picks one (for an
// update).
func (w *workload) pick(remove bool) (objRef, types.UID, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.live) == 0 {
		return objRef{}, "", false
	}
	i := w.rnd.Intn(len(w.live))
	o := w.live[i]
	uid := w.uids[o]
	if remove {
		last := w.live[len(w.live)-1]
		w.live[i] = last
		w.index[last] = i
		w.live = w.live[:len(w.live)-1]
		delete(w.index, o)
		delete(w.uids, o)
	}
	return o, uid, true
}

func (w *workload) population() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.live)
}

func (w *workload) create(ctx context.Context) error {
	w.mu.Lock()
	w.seq++
	o := objRef{ns: w.ns, name: fmt.Sprintf("o%d", w.seq)}
	// One kind in one namespace draws nothing: its runs stay as they were.
	if len(w.namespaces) > 1 {
		o.ns = w.namespaces[w.rnd.Intn(len(w.namespaces))]
	}
	if w.kinds > 1 && w.rnd.Intn(2) == 1 {
		o.kind = OwnedKind
	}
	w.mu.Unlock()
	meta := w.meta(o, "")
	var uid types.UID
	if o.kind == OwnedKind {
		s, err := w.cs.CoreV1().Secrets(o.ns).Create(ctx, &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"n": []byte("0")}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		uid = s.UID
	} else {
		cm, err := w.cs.CoreV1().ConfigMaps(o.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"n": "0"}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		uid = cm.UID
	}
	w.addLive(o, uid)
	return nil
}

// meta is o's metadata for a write: its name, its UID when known, and in
// a run of several namespaces the group's label.
func (w *workload) meta(o objRef, uid types.UID) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: o.name, UID: uid}
	if len(w.namespaces) > 1 || w.kinds > 1 {
		m.Labels = map[string]string{GroupLabel: w.ns}
	}
	return m
}

func (w *workload) update(ctx context.Context, n int) error {
	o, uid, ok := w.pick(false)
	if !ok {
		return nil
	}
	meta := w.meta(o, uid)
	var err error
	if o.kind == OwnedKind {
		_, err = w.cs.CoreV1().Secrets(o.ns).Update(ctx, &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"n": []byte(strconv.Itoa(n))}}, metav1.UpdateOptions{})
	} else {
		_, err = w.cs.CoreV1().ConfigMaps(o.ns).Update(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"n": strconv.Itoa(n)}}, metav1.UpdateOptions{})
	}
	return err
}

func (w *workload) delete(ctx context.Context) error {
	o, uid, ok := w.pick(true)
	if !ok {
		return nil
	}
	start := time.Now().UnixNano()
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	var err error
	if o.kind == OwnedKind {
		err = w.cs.CoreV1().Secrets(o.ns).Delete(ctx, o.name, opts)
	} else {
		err = w.cs.CoreV1().ConfigMaps(o.ns).Delete(ctx, o.name, opts)
	}
	d := Delete{Key: o.key(), UID: string(uid), Start: start, End: time.Now().UnixNano(), OK: err == nil}
	w.mu.Lock()
	w.deletes = append(w.deletes, d)
	w.mu.Unlock()
	if err != nil {
		// It may have happened anyway (a timeout): the checker looks the
		// object up on the server at the end. If it did not, it is
		// still there and no longer changed.
		return err
	}
	return nil
}

// burst makes the workers write at twice the rate for d, and only delete
// while more than floor objects are left (create otherwise), so that
// deletes go on for all of d.
func (w *workload) burst(d time.Duration, floor int) {
	w.mu.Lock()
	w.burstFloor = floor
	w.mu.Unlock()
	w.burstUntil.Store(time.Now().Add(d).UnixNano())
}

// start starts the workers.
func (w *workload) start() {
	if w.running {
		return
	}
	w.running = true
	w.stop = make(chan struct{})
	for i := range w.workers {
		w.wg.Add(1)
		go w.work(i)
	}
}

// halt stops the workers and waits for them.
func (w *workload) halt() {
	if !w.running {
		return
	}
	w.running = false
	close(w.stop)
	w.wg.Wait()
}

func (w *workload) work(i int) {
	defer w.wg.Done()
	// A write under way when the workload halts is not cancelled: the API
	// server may still commit a write whose client gave up, after the
	// members settled on the objects the checker then compares with the
	// server's. Each write ends within its timeout.
	ctx := context.Background()
	w.mu.Lock()
	rnd := rand.New(rand.NewSource(w.rnd.Int63()))
	w.mu.Unlock()
	every := time.Duration(w.workers) * time.Second / time.Duration(w.rate)
	next := time.Now()
	n := 0
	for {
		burst := time.Now().UnixNano() < w.burstUntil.Load()
		if now := time.Now(); next.Before(now.Add(-every)) {
			next = now // no catching up after a slow write
		}
		if burst {
			next = next.Add(every / 2)
		} else {
			next = next.Add(every)
		}
		select {
		case <-w.stop:
			return
		case <-time.After(time.Until(next)):
		}
		n++
		opCtx, opCancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		pop := w.population()
		w.mu.Lock()
		floor := w.burstFloor
		w.mu.Unlock()
		switch k := rnd.Intn(10); {
		case burst && pop > floor:
			err = w.delete(opCtx)
		case burst:
			err = w.create(opCtx)
		case k < 2 || pop < w.target/2:
			err = w.create(opCtx)
		case k < 8 && pop > 0:
			err = w.update(opCtx, n)
		case pop > w.target/4:
			err = w.delete(opCtx)
		default:
			err = w.create(opCtx)
		}
		opCancel()
		if err != nil {
			w.failed.Add(1)
		} else {
			w.ops.Add(1)
		}
	}
}

func (w *workload) recordedDeletes() []Delete {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Delete(nil), w.deletes...)
}
