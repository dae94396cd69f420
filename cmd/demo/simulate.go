package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/google/uuid"
)

// maxWatchBacklog is how many events a watcher of the simulated cluster may
// have waiting before the workload pauses: the informer sets the pace when
// it cannot keep up with --rate, and memory stays bounded.
const maxWatchBacklog = 5000

type op int

const (
	opCreate op = iota
	opUpdate
	opDelete
)

func (o op) String() string { return [...]string{"create", "update", "delete"}[o] }

// workload creates, updates and deletes pods in a simulated cluster, keeping
// the population near a target. It is driven by one goroutine at a time.
type workload struct {
	cluster    *simCluster
	rng        *rand.Rand
	namespaces []string
	target     int
	pods       []*corev1.Pod // live pods, as last written; never modified
	seq        int           // names are pod-<seq>, never reused
	counts     [3]int64      // per op
	// faults are functions run receives and runs between its steps: the
	// cluster faults (faults.go). nil: none.
	faults <-chan func(*workload)
}

func newWorkload(c *simCluster, seed uint64, namespaces, target int) *workload {
	ns := make([]string, max(namespaces, 1))
	for i := range ns {
		ns[i] = fmt.Sprintf("demo-%d", i+1)
	}
	return &workload{
		cluster:    c,
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		namespaces: ns,
		target:     target,
	}
}

// populate creates pods until the target population is reached.
func (w *workload) populate() error {
	for len(w.pods) < w.target {
		if err := w.create(); err != nil {
			return err
		}
	}
	return nil
}

// step applies one random change and reports which.
func (w *workload) step() (op, error) {
	o := w.next()
	var err error
	switch o {
	case opCreate:
		err = w.create()
	case opUpdate:
		err = w.update()
	case opDelete:
		err = w.delete()
	}
	return o, err
}

// next picks an operation: mostly updates; creates and deletes steer the
// population towards the target.
func (w *workload) next() op {
	n := len(w.pods)
	if n == 0 {
		return opCreate
	}
	if w.rng.Float64() < 0.6 {
		return opUpdate
	}
	pCreate := 0.5 + 0.5*float64(w.target-n)/float64(max(w.target, 1))
	if w.rng.Float64() < pCreate {
		return opCreate
	}
	return opDelete
}

var phases = [...]corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodRunning, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed}

func (w *workload) create() error {
	w.seq++
	name := fmt.Sprintf("pod-%06d", w.seq)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: w.namespaces[w.rng.IntN(len(w.namespaces))],
			UID:       toUID(w.seq),
			Labels:    map[string]string{"app": fmt.Sprintf("app-%d", w.rng.IntN(10))},
		},
		Spec: corev1.PodSpec{
			NodeName:   fmt.Sprintf("node-%d", w.rng.IntN(5)),
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if err := w.cluster.create(pod); err != nil {
		return err
	}
	w.pods = append(w.pods, pod)
	w.counts[opCreate]++
	return nil
}

func (w *workload) update() error {
	i := w.rng.IntN(len(w.pods))
	pod := w.pods[i].DeepCopy()
	pod.Status.Phase = phases[w.rng.IntN(len(phases))]
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations["demo/revision"] = strconv.Itoa(w.rng.IntN(1 << 20))
	if err := w.cluster.update(pod); err != nil {
		return err
	}
	w.pods[i] = pod
	w.counts[opUpdate]++
	return nil
}

func (w *workload) delete() error {
	i := w.rng.IntN(len(w.pods))
	if err := w.cluster.delete(w.pods[i]); err != nil {
		return err
	}
	w.removeAt(i)
	return nil
}

// removeAt forgets the deleted pod w.pods[i] and counts the delete.
func (w *workload) removeAt(i int) {
	last := len(w.pods) - 1
	w.pods[i] = w.pods[last]
	w.pods[last] = nil
	w.pods = w.pods[:last]
	w.counts[opDelete]++
}

// run applies changes at rate per second (0: as fast as the informer takes
// them) until ctx is done. Whenever a watcher falls maxWatchBacklog events
// behind it waits, and it does not catch up on the time lost.
func (w *workload) run(ctx context.Context, rate float64) error {
	const tick = 5 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	var done, due int64
	burst := int64(rate * (100 * time.Millisecond).Seconds()) // most owed after a stall
	for {
		select {
		case <-ctx.Done():
			return nil
		case f := <-w.faults:
			f(w)
			continue
		case <-t.C:
		}
		if rate > 0 {
			due = int64(rate * time.Since(start).Seconds())
			if due-done > max(burst, 1) {
				done = due - max(burst, 1)
			}
		} else {
			due = done + 10000
		}
		for done < due {
			if done%64 == 0 && w.cluster.backlog() > maxWatchBacklog {
				break
			}
			if _, err := w.step(); err != nil {
				return err
			}
			done++
			if done%1024 == 0 && ctx.Err() != nil {
				return nil
			}
		}
	}
}

// toUID is the UID of the seq-th pod: a UUID as random-looking as the API
// server's, but the same in every run. (UIDs that differ only in their last
// digits would crowd into a few of a sharded group's ranges: FNV-1a, the
// shard selectors' hash, spreads a string's last bytes over few of its high
// bits.)
func toUID(seq int) types.UID {
	return types.UID(uuid.NewSHA1(uuid.NameSpaceOID, []byte("actorinformer-demo/pod/"+strconv.Itoa(seq))).String())
}
