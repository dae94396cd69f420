package bench

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/internal/nemesis"
	"github.com/actorinformer/actorinformer/internal/shardproc"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// BenchmarkShardedKinds compares, on a real kube-apiserver with the
// ShardedListAndWatch gate on, the bytes of a group of two kinds with
// those of one unsharded informer of each: (a) two processes, one
// informer of ConfigMaps and one of Secrets; (c) three members of a group
// hashed by namespace carrying ConfigMaps and Secrets (shard's AddKind),
// whose ranges the server filters. The objects, as many of each kind,
// are spread over 48 namespaces (3 in each of the 16 ranges). It reports,
// per kind, the bytes the members received from the API server (counted
// at their HTTP transport, by the resource each request named) against
// (a)'s process of that kind, once synced and over a stream of updates
// (a quarter of each kind's objects). 1,000 objects of each kind by
// default; -bench.full: 20,000.
//
//	go test ./bench -run '^$' -bench ShardedKinds -benchtime 1x -v -args -bench.full
func BenchmarkShardedKinds(b *testing.B) {
	objects := 1000
	if benchSizes() == Full {
		objects = 20000
	}
	c := testcluster.Start(b, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"})
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const ranges = 16
	namespaces := nemesis.SpreadNamespaces("kinds", ranges, 3)
	for _, ns := range namespaces {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	labels := map[string]string{"bench": "kinds"}
	start := time.Now()
	parallel(16, objects, func(i int) error {
		ns, name := namespaces[i%len(namespaces)], fmt.Sprintf("o%d", i)
		meta := metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"v": "0"}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: meta, StringData: map[string]string{"v": "0"}}, metav1.CreateOptions{})
		return err
	}, b)
	b.Logf("%d ConfigMaps and %d Secrets created in %d namespaces in %v", objects, objects, len(namespaces), time.Since(start).Round(time.Millisecond))
	bin, err := shardproc.Build(false)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for run := range b.N {
		runKindsBench(b, c, cs, bin, namespaces, objects, run)
	}
}

func runKindsBench(b *testing.B, c *testcluster.Cluster, cs kubernetes.Interface, bin string, namespaces []string, objects, run int) {
	common := []string{"-host", c.Host(), "-token", c.AdminToken(), "-selector", "bench=kinds"}
	a := []*shardproc.Proc{
		shardproc.Start(b, bin, "a-configmaps", append(common, "-mode", "unsharded", "-resource", "configmaps")...),
		shardproc.Start(b, bin, "a-secrets", append(common, "-mode", "unsharded", "-resource", "secrets")...),
	}
	prefix := fmt.Sprintf("/actorinformer-kinds-bench/%d-%d", time.Now().UnixNano(), run)
	const n, ranges = 3, 16
	cc := make([]*shardproc.Proc, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc[i] = shardproc.Start(b, bin, fmt.Sprintf("c%d", i), append(common, "-mode", "sharded", "-resource", "configmaps", "-owned", "secrets",
				"-etcd", c.EtcdURL(), "-etcd-prefix", prefix, "-etcd-ttl", "2s", "-ranges", strconv.Itoa(ranges),
				"-group", fmt.Sprintf("kinds-%d", run))...)
		}()
	}
	wg.Wait()
	all := slices.Concat(a, cc)
	wait(b, 5*time.Minute, "every process synced, each range served once", func() string {
		for _, p := range all {
			if st, err := p.State(false); err != nil || !st.Synced {
				return p.Name + " not synced"
			}
		}
		return covered(cc, ranges)
	})
	synced := kindBytes(b, a, cc)
	for _, p := range all {
		st, _ := p.State(false)
		b.Logf("%s synced: %d lists, %d warm starts, %d fallbacks, bytes by resource %v", p.Name, st.ListRequests, st.WarmStarts, st.WarmFallbacks, st.ResourceBytes)
	}

	ctx := context.Background()
	rnd := rand.New(rand.NewSource(int64(run)))
	updates := objects / 4
	start := time.Now()
	parallel(8, updates, func(i int) error {
		k := rnd.Intn(objects)
		ns, name := namespaces[k%len(namespaces)], fmt.Sprintf("o%d", k)
		patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"gen":"%d"}}}`, i+1))
		if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		_, err := cs.CoreV1().Secrets(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}, b)
	b.Logf("%d updates of each kind in %v", updates, time.Since(start).Round(time.Millisecond))
	drainStreams(b, all)
	total := kindBytes(b, a, cc)
	var out strings.Builder
	fmt.Fprintf(&out, "\n%d objects of each kind in %d namespaces, %d updates of each, %d members, %d ranges\n\n", objects, len(namespaces), updates, n, ranges)
	out.WriteString("| kind | (a) synced, MB | members synced, MB | × (a) | (a) stream, MB | members stream, MB | × (a) |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for i, kind := range []string{"configmaps", "secrets"} {
		sa, sc := synced[0][i], synced[1][i]
		ta, tc := total[0][i]-sa, total[1][i]-sc
		fmt.Fprintf(&out, "| %s | %.2f | %.2f | %.3f | %.2f | %.2f | %.3f |\n", kind, sa/1e6, sc/1e6, sc/sa, ta/1e6, tc/1e6, tc/ta)
		b.ReportMetric(sc/sa, "synced-"+kind+"/(a)")
		b.ReportMetric(tc/ta, "stream-"+kind+"/(a)")
	}
	b.Log(out.String())
	for _, p := range all {
		p.Stop(30 * time.Second)
	}
}

// kindBytes are the bytes of ConfigMaps and Secrets that (a)'s process of
// each kind received, and the members together.
func kindBytes(b testing.TB, a, members []*shardproc.Proc) (out [2][2]float64) {
	for i, p := range a {
		st, err := p.State(false)
		if err != nil {
			b.Fatal(err)
		}
		out[0][i] = float64(st.ResourceBytes[[]string{"configmaps", "secrets"}[i]])
	}
	for _, p := range members {
		st, err := p.State(false)
		if err != nil {
			b.Fatal(err)
		}
		out[1][0] += float64(st.ResourceBytes["configmaps"])
		out[1][1] += float64(st.ResourceBytes["secrets"])
	}
	return out
}
