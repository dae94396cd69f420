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
type workload struct {
	cs      kubernetes.Interface
	ns      string
	rate    int // writes per second, all workers together
	workers int
	target  int // the population it steers towards

	mu      sync.Mutex
	live    []string // names
	uids    map[string]types.UID
	index   map[string]int // name → index in live
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

func newWorkload(cs kubernetes.Interface, ns string, rate, target int, seed int64) *workload {
	return &workload{cs: cs, ns: ns, rate: max(rate, 1), workers: workers, target: target,
		uids: map[string]types.UID{}, index: map[string]int{}, rnd: rand.New(rand.NewSource(seed))}
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

func (w *workload) addLive(name string, uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.index[name] = len(w.live)
	w.live = append(w.live, name)
	w.uids[name] = uid
}

// take removes a random live name (for a delete), or picks one (for an
// update).
func (w *workload) pick(remove bool) (string, types.UID, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.live) == 0 {
		return "", "", false
	}
	i := w.rnd.Intn(len(w.live))
	name := w.live[i]
	uid := w.uids[name]
	if remove {
		last := w.live[len(w.live)-1]
		w.live[i] = last
		w.index[last] = i
		w.live = w.live[:len(w.live)-1]
		delete(w.index, name)
		delete(w.uids, name)
	}
	return name, uid, true
}

func (w *workload) population() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.live)
}

func (w *workload) create(ctx context.Context) error {
	w.mu.Lock()
	w.seq++
	name := fmt.Sprintf("o%d", w.seq)
	w.mu.Unlock()
	cm, err := w.cs.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": "0"}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	w.addLive(name, cm.UID)
	return nil
}

func (w *workload) update(ctx context.Context, n int) error {
	name, uid, ok := w.pick(false)
	if !ok {
		return nil
	}
	_, err := w.cs.CoreV1().ConfigMaps(w.ns).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}, Data: map[string]string{"n": strconv.Itoa(n)}}, metav1.UpdateOptions{})
	return err
}

func (w *workload) delete(ctx context.Context) error {
	name, uid, ok := w.pick(true)
	if !ok {
		return nil
	}
	start := time.Now().UnixNano()
	err := w.cs.CoreV1().ConfigMaps(w.ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	d := Delete{Key: w.ns + "/" + name, UID: string(uid), Start: start, End: time.Now().UnixNano(), OK: err == nil}
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
