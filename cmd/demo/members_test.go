//go:build !race

// These tests run a sharded group of several protoactor cluster members in
// one process (--members), which the race detector cannot take: each
// member's remote.Start sets gRPC's global logger (grpclog.SetLoggerV2)
// while the other members' gRPC goroutines read it, a race in protoactor.
// hack/test.sh runs them in a build without -race, with tracing compiled
// in (the page's traces and the key's handover spans need it).

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/actorinformer/actorinformer/internal/testcluster"
	"github.com/actorinformer/actorinformer/telemetry"
)

// protoactor's cluster members leave goroutines that outlive them:
//   - the in-memory provider's TTL loop, whose ticker Shutdown stops without
//     ending the loop;
//   - the gossip's throttle timers, which end after their period;
//   - the gRPC client connections of the endpoint writers: a writer whose
//     connection to a member that has gone fails makes a new one on each
//     retry (sleeping 2 s in between) and never closes the former ones, which
//     redial on their own.
func init() {
	clusterGoroutines = append(clusterGoroutines,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster/clusterproviders/test.(*Provider).startTTLReport.func1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.NewGossipActor.NewThrottleWithLogger.func2.1"),
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/remote.(*endpointWriter).initialize"),
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreTopFunction("google.golang.org/grpc.(*addrConn).resetTransportAndUnlock"),
	)
}

// startSharded runs the demo with a sharded group of members on the
// simulated cluster, with its web server, until the test ends. The
// provider drops a killed member after ttl.
func startSharded(t *testing.T, members int, ttl time.Duration) *demoUnderTest {
	t.Helper()
	setOTelEnv(t)
	d := &demoUnderTest{t: t, parent: t, client: &http.Client{Timeout: 20 * time.Second}, done: make(chan error, 1)}
	ready := make(chan struct{})
	cfg := config{
		rate: 100, pods: 300, namespaces: 2, seed: 1,
		interval: time.Second, handlers: 2, workers: 1, logLevel: "off",
		members: members, ranges: 16, memberTTL: ttl,
		http:    "127.0.0.1:0",
		serving: func(url string) { d.url = strings.TrimSuffix(url, "/"); close(ready) },
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { d.done <- run(ctx, cfg, &d.out, io.Discard) }()
	select {
	case <-ready:
	case err := <-d.done:
		cancel()
		t.Fatalf("the demo ended before serving: %v\n%s", err, d.out.String())
	}
	t.Cleanup(d.stop)
	return d
}

// post sends a fault and returns the answer's code and its message or
// error.
func (d *demoUnderTest) post(body string) (int, string) {
	d.t.Helper()
	code, b := d.do(http.MethodPost, "/api/faults", body)
	var r struct {
		Message string `json:"message"`
		Error   string `json:"error"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		d.t.Fatalf("POST %s: %d %s", body, code, b)
	}
	return code, r.Message + r.Error
}

// memberOf returns the snapshot's member name.
func memberOf(s *shardSnapshot, name string) (memberSnapshot, bool) {
	for _, m := range s.Members {
		if m.Name == name {
			return m, true
		}
	}
	return memberSnapshot{}, false
}

// servedOnceBy says why the ranges are not each delivered by exactly one
// of the members named, and the caches not equal to the cluster's pods
// (each once); "" when they are.
func servedOnceBy(s *shardSnapshot, names ...string) string {
	for r, owners := range s.Owners {
		if len(owners) != 1 || !slices.Contains(names, owners[0]) {
			return fmt.Sprintf("range %d delivered by %v, want one of %v", r, owners, names)
		}
	}
	if s.ClusterObjects == nil || s.Cached != int(*s.ClusterObjects) || s.Distinct != s.Cached {
		return fmt.Sprintf("members cache %d (%d distinct keys), the cluster holds %v", s.Cached, s.Distinct, s.ClusterObjects)
	}
	for _, m := range s.Members {
		if slices.Contains(names, m.Name) && (m.State != "live" || !m.Synced) {
			return fmt.Sprintf("member %s %s, synced %v", m.Name, m.State, m.Synced)
		}
	}
	return ""
}

// awaitShard polls the snapshot until why returns "".
func (d *demoUnderTest) awaitShard(what string, why func(*shardSnapshot) string) *shardSnapshot {
	d.t.Helper()
	var last string
	s := d.await(what, func(s snapshot) bool {
		if s.Shard == nil {
			last = "no shard in the snapshot"
			return false
		}
		last = why(s.Shard)
		return last == ""
	})
	if last != "" {
		d.t.Fatalf("%s: %s", what, last)
	}
	return s.Shard
}

// TestShardedWebAPI runs three members and checks the members panel's
// data, each member fault from the API and its effect, the answers to bad
// requests, the waterfalls' member and range, and the key search's owner.
func TestShardedWebAPI(t *testing.T) {
	d := startSharded(t, 3, time.Second)

	t.Run("members", func(t *testing.T) {
		d.t = t
		// A range is served (published) just before its acquire is
		// recorded: wait for both.
		s := d.awaitShard("three members serving every range once, each range's acquire recorded", func(s *shardSnapshot) string {
			if why := servedOnceBy(s, "m1", "m2", "m3"); why != "" {
				return why
			}
			if len(s.Handovers) < 16 {
				return fmt.Sprintf("%d handovers recorded", len(s.Handovers))
			}
			return ""
		})
		if s.Ranges != 16 || len(s.Owners) != 16 || s.Mode != "client" || !strings.Contains(s.ModeNote, "fake clientset") {
			t.Errorf("ranges %d, owners %d, mode %q (%s); want 16 ranges, client mode", s.Ranges, len(s.Owners), s.Mode, s.ModeNote)
		}
		for _, m := range s.Members {
			if len(m.Ranges) == 0 || m.CacheSize == 0 || m.Mode != "client" || m.Filtered == 0 || len(m.View) != 3 || len(m.Handlers) != 2 {
				t.Errorf("member %+v", m)
			}
		}
		// The terminal's line says the same.
		d.awaitOutput(t, "         members m1 ")
	})

	t.Run("kill", func(t *testing.T) {
		d.t = t
		// A handler stopped on m2 alone: the kill does not wait for it.
		code, msg := d.post(`{"fault":"stop","handler":"count","member":"m2"}`)
		if code != http.StatusOK || !strings.Contains(msg, "handler count of member m2 stopped") {
			t.Fatalf("stop m2's handler: %d %s", code, msg)
		}
		d.awaitShard("m2's handler backlog growing", func(s *shardSnapshot) string {
			if m2, _ := memberOf(s, "m2"); len(m2.Handlers) != 2 || m2.Handlers[1].Backlog == 0 {
				return fmt.Sprintf("m2's handlers %+v", m2.Handlers)
			}
			return ""
		})
		code, msg = d.post(`{"fault":"kill","member":"m2"}`)
		if code != http.StatusOK || !strings.Contains(msg, "m2 killed") {
			t.Fatalf("kill m2: %d %s", code, msg)
		}
		s := d.awaitShard("m1 and m3 serving every range once", func(s *shardSnapshot) string {
			if m, _ := memberOf(s, "m2"); m.State != "killed" || !m.Dropped || len(m.Ranges) != 0 {
				return fmt.Sprintf("m2 %s, dropped %v, delivers %v", m.State, m.Dropped, m.Ranges)
			}
			return servedOnceBy(s, "m1", "m3")
		})
		var takeovers int
		for _, h := range s.Handovers {
			if h.Kind == "takeover" {
				takeovers++
				if h.From != "m2" || (h.To != "m1" && h.To != "m3") || h.GapMs == nil || *h.GapMs <= 0 {
					t.Errorf("takeover %+v", h)
				}
			}
		}
		if takeovers == 0 {
			t.Errorf("no takeover from m2 in the timeline: %+v", s.Handovers)
		}
	})

	t.Run("add", func(t *testing.T) {
		d.t = t
		code, msg := d.post(`{"fault":"add"}`)
		if code != http.StatusOK || !strings.Contains(msg, "m4 joins") {
			t.Fatalf("add: %d %s", code, msg)
		}
		s := d.awaitShard("m1, m3 and m4 serving every range once", func(s *shardSnapshot) string {
			m, _ := memberOf(s, "m4")
			if len(m.Ranges) == 0 {
				return "m4 delivers no range"
			}
			// A range's handover is recorded once its activation has
			// ended, just after the range shows as delivered.
			for _, r := range m.Ranges {
				if !slices.ContainsFunc(s.Handovers, func(h handoverJSON) bool { return h.To == "m4" && h.Range == r }) {
					return fmt.Sprintf("range %d's handover to m4 not recorded yet", r)
				}
			}
			return servedOnceBy(s, "m1", "m3", "m4")
		})
		var moved int
		for _, h := range s.Handovers {
			if h.To == "m4" && h.Kind == "handover" && h.ReleaseMs != nil {
				moved++
			}
		}
		if m, _ := memberOf(s, "m4"); moved != len(m.Ranges) {
			t.Errorf("%d handovers to m4 with their release, m4 delivers %v; handovers: %s", moved, m.Ranges, fmtHandovers(s.Handovers))
		}
	})

	t.Run("leave", func(t *testing.T) {
		d.t = t
		code, msg := d.post(`{"fault":"leave","member":"m1"}`)
		if code != http.StatusOK || !strings.Contains(msg, "m1 leaves") {
			t.Fatalf("leave m1: %d %s", code, msg)
		}
		s := d.awaitShard("m3 and m4 serving every range once", func(s *shardSnapshot) string {
			if m, _ := memberOf(s, "m1"); m.State != "left" {
				return "m1 is " + m.State
			}
			return servedOnceBy(s, "m3", "m4")
		})
		var fromM1 int
		for _, h := range s.Handovers {
			if h.From == "m1" {
				if h.Kind != "handover" || h.ReleaseMs == nil {
					t.Errorf("m1's range handed over as %+v", h)
				}
				fromM1++
			}
		}
		if fromM1 == 0 {
			t.Error("no handover from m1 in the timeline")
		}
	})

	t.Run("partition", func(t *testing.T) {
		d.t = t
		code, msg := d.post(`{"fault":"partition","member":"m3","seconds":2}`)
		if code != http.StatusOK || !strings.Contains(msg, "m3 partitioned for 2s") {
			t.Fatalf("partition m3: %d %s", code, msg)
		}
		s := d.snapshot().Shard
		if m, _ := memberOf(s, "m3"); m.PartitionedS <= 0 {
			t.Errorf("m3 partitioned for %vs", m.PartitionedS)
		}
		d.awaitShard("m3's messages dropped", func(s *shardSnapshot) string {
			if m, _ := memberOf(s, "m3"); m.MessagesDropped == 0 {
				return "none dropped"
			}
			return ""
		})
		// The provider still lists m3: nothing moves, and once the
		// partition is over the group goes on as before.
		d.awaitShard("the partition over, m3 and m4 serving every range once", func(s *shardSnapshot) string {
			if m, _ := memberOf(s, "m3"); m.PartitionedS > 0 {
				return "m3 still partitioned"
			}
			return servedOnceBy(s, "m3", "m4")
		})
	})

	t.Run("traces name member and range", func(t *testing.T) {
		d.t = t
		if telemetry.CompiledOut {
			t.Skip("tracing compiled out (actorinformer_notrace)")
		}
		found := d.awaitTrace("recent", "delta trace of m3 or m4 with a range", func(tr traceJSON) bool {
			return tr.Root == "reflector.receive" && (tr.Member == "m3" || tr.Member == "m4") && tr.Range != nil
		})
		var k keyJSON
		d.getJSON("/api/key?key="+found.Key, http.StatusOK, &k)
		ks := k.Shard
		if ks == nil || ks.Range == nil {
			// The workload may have deleted it: then it is found nowhere.
			t.Logf("key %s of trace %s: %+v", found.Key, found.TraceID, ks)
			if ks == nil || ks.Found != "" {
				t.Fatalf("key %s: shard %+v", found.Key, ks)
			}
			return
		}
		if *ks.Range != *found.Range || (ks.Owner != "m3" && ks.Owner != "m4") || !slices.Equal(ks.Delivering, []string{ks.Owner}) || !slices.Equal(ks.CachedBy, []string{ks.Owner}) {
			t.Errorf("key %s (range %d in its trace): %+v", found.Key, *found.Range, ks)
		}
		if len(ks.Handovers) == 0 {
			t.Fatalf("key %s: no handover span of range %d", found.Key, *ks.Range)
		}
		for _, h := range ks.Handovers {
			if (h.Root != "shard.acquire" && h.Root != "shard.release") || h.Range == nil || *h.Range != *ks.Range || h.Member == "" {
				t.Errorf("handover span %+v", h)
			}
		}
		d.do(http.MethodDelete, "/api/key?key="+found.Key, "")
	})

	t.Run("bad requests", func(t *testing.T) {
		d.t = t
		for _, c := range []struct {
			body string
			code int
			want string
		}{
			{`{"fault":"kill","member":"m9"}`, 400, "unknown member"},
			{`{"fault":"kill"}`, 400, "no member named"},
			{`{"fault":"leave","member":"nobody"}`, 400, "unknown member"},
			{`{"fault":"partition","member":"m3","seconds":1000}`, 400, "seconds"},
			{`{"fault":"partition","member":"m3","seconds":-1}`, 400, "seconds"},
			{`{"fault":"kill","member":"m3","seconds":5}`, 400, "only partition"},
			{`{"fault":"add","member":"m7"}`, 400, "takes no member"},
			{`{"fault":"slow","handler":"count1","member":"m9","delay_ms":5}`, 400, "unknown member"},
			{`{"fault":"kill","member":"m2"}`, 409, "killed already"},
			{`{"fault":"leave","member":"m1"}`, 409, "left already"},
			{`{"fault":"partition","member":"m2"}`, 409, "is killed"},
			{`{"fault":"slow","handler":"count1","member":"m2","delay_ms":5}`, 409, "is killed"},
		} {
			code, msg := d.post(c.body)
			if code != c.code || !strings.Contains(msg, c.want) {
				t.Errorf("%s: %d %q, want %d and a message with %q", c.body, code, msg, c.code, c.want)
			}
		}
		code, msg := d.post(`{"fault":"kill","member":"m4"}`)
		if code != http.StatusOK {
			t.Fatalf("kill m4: %d %s", code, msg)
		}
		code, msg = d.post(`{"fault":"kill","member":"m3"}`)
		if code != http.StatusConflict || !strings.Contains(msg, "last one") {
			t.Errorf("kill the last member: %d %q, want 409 saying it is the last", code, msg)
		}
		code, msg = d.post(`{"fault":"leave","member":"m3"}`)
		if code != http.StatusConflict || !strings.Contains(msg, "last one") {
			t.Errorf("the last member leaving: %d %q, want 409 saying it is the last", code, msg)
		}
		d.awaitShard("m3 alone serving every range", func(s *shardSnapshot) string { return servedOnceBy(s, "m3") })
	})
}

// awaitOutput waits until the demo's output holds want.
func (d *demoUnderTest) awaitOutput(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(d.out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the output lacks %q:\n%s", want, d.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestShardedTerminal runs two members with --fault kill=m1 and --fault add,
// without the web page, and checks what the terminal shows: the filter
// mode, a line of the members each interval, and at exit each member's
// totals and the handovers, m1's ranges taken over.
func TestShardedTerminal(t *testing.T) {
	setOTelEnv(t, "OTEL_TRACES_EXPORTER", "none")
	var faults faultFlags
	for _, f := range []string{"kill=m1", "add"} {
		if err := faults.Set(f); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config{
		rate: 100, pods: 200, namespaces: 2, seed: 1, duration: 10 * time.Second, interval: 500 * time.Millisecond,
		handlers: 2, workers: 1, logLevel: "off", members: 2, ranges: 8, memberTTL: 500 * time.Millisecond, faults: faults,
	}
	var out syncBuffer
	if err := run(context.Background(), cfg, &out, io.Discard); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"group:   2 members of sharded informer group \"pods\"",
		"over 2 members (m1 ",
		"filter:  client, on the client: the simulated cluster (client-go's fake clientset) ignores shard selectors",
		"\n         members ", // m1 goes once the provider drops it
		" | m3 ",
		"members of group pods (8 ranges, filter client, ",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 9 && (f[0] == "m1" || f[0] == "m2" || f[0] == "m3") {
			rows[f[0]] = f
		}
	}
	// member state up ranges acquired released handled reconciles released-keys
	if r := rows["m1"]; r == nil || r[1] != "killed" || r[3] != "0" {
		t.Errorf("m1's totals %v; want killed, no range at the end", r)
	}
	for _, m := range []string{"m2", "m3"} {
		if r := rows[m]; r == nil || r[1] != "live" || r[3] == "0" || r[6] == "0" {
			t.Errorf("%s's totals %v; want live, ranges at the end, events handled", m, r)
		}
	}
	if rows["m2"] != nil && rows["m3"] != nil {
		if a, b := atoi(rows["m2"][3]), atoi(rows["m3"][3]); a+b != 8 {
			t.Errorf("m2 and m3 delivered %d and %d ranges at the end, want 8 between them", a, b)
		}
	}
	if !strings.Contains(s, " m1 -> m2   takeover ") && !strings.Contains(s, " m1 -> m3   takeover ") {
		t.Errorf("no takeover from m1 among the handovers")
	}
	// The member added gets ranges from m2, or m1's that nobody served yet
	// (m1's lease had not lapsed when m3 joined): which, timing says.
	if !strings.Contains(s, " m2 -> m3   handover ") && !strings.Contains(s, " m1 -> m3   takeover ") {
		t.Errorf("no range went to m3 (the member added) among the handovers")
	}
	if t.Failed() {
		t.Logf("output:\n%s", s)
	}
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// TestShardedOnARealCluster runs two members against kube-apiserver through
// a kubeconfig, with and without the ShardedListAndWatch feature gate, and
// checks that the terminal says where they filter (on the server with the
// gate, on the client without) and that the members' caches together hold
// every pod once. In a namespace without pods, the mode is known as soon
// (what cmd/localcluster with no --pods shows).
func TestShardedOnARealCluster(t *testing.T) {
	for _, tc := range []struct {
		gates, mode, note string
		pods              int
	}{
		{"ShardedListAndWatch=true", "server", "on the server: the API server applies the shard selectors", 40},
		{"", "client", "on the client: the API server ignores or rejects shard selectors", 40},
		{"ShardedListAndWatch=true", "server", "on the server: the API server applies the shard selectors", 0},
	} {
		t.Run(fmt.Sprintf("mode %s, %d pods", tc.mode, tc.pods), func(t *testing.T) {
			c := testcluster.Start(t, testcluster.Options{FeatureGates: tc.gates})
			client := kubernetes.NewForConfigOrDie(c.Config())
			pods := tc.pods
			for i := range pods {
				if _, err := client.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i)},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
				}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			setOTelEnv(t, "OTEL_TRACES_EXPORTER", "none")
			cfg := config{kubeconfig: writeKubeconfig(t, c), duration: 6 * time.Second, interval: 500 * time.Millisecond,
				handlers: 1, workers: 1, logLevel: "off", members: 2, ranges: 8, memberTTL: time.Second}
			var out syncBuffer
			if err := run(context.Background(), cfg, &out, io.Discard); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			s := out.String()
			for _, want := range []string{
				fmt.Sprintf("synced %d pods in ", pods),
				"filter:  " + tc.mode + ", " + tc.note,
				fmt.Sprintf(" | cached %d (%d keys) | filter %s\n", pods, pods, tc.mode),
				"members of group pods (8 ranges, filter " + tc.mode + ", ",
			} {
				if !strings.Contains(s, want) {
					t.Errorf("the output lacks %q", want)
				}
			}
			// The server filters: nothing dropped; otherwise each range's
			// informer receives every pod and drops the others' (with pods).
			none := strings.Contains(s, " 0 objects received outside their ranges and dropped")
			if want := tc.mode == "server" || pods == 0; none != want {
				t.Errorf("no object dropped: %v, want %v", none, want)
			}
			if t.Failed() {
				t.Logf("output:\n%s", s)
			}
		})
	}
}

func fmtHandovers(hs []handoverJSON) string {
	var b strings.Builder
	for _, h := range hs {
		rel := "-"
		if h.ReleaseMs != nil {
			rel = fmt.Sprint(*h.ReleaseMs)
		}
		fmt.Fprintf(&b, "\n r%d %s->%s %s at %.2fs release %s", h.Range, h.From, h.To, h.Kind, h.AtS, rel)
	}
	return b.String()
}
