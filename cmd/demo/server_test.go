package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actorinformer/actorinformer/telemetry"
)

// demoUnderTest is the demo run by run() with its web server on a free
// loopback port.
type demoUnderTest struct {
	t      *testing.T // the running (sub)test
	parent *testing.T
	url    string
	client *http.Client
	out    syncBuffer
	cancel context.CancelFunc
	done   chan error
}

// watchedBeforeStart is the key a test watches before the informer starts:
// with one namespace and 50 pods, the workload's first create.
const watchedBeforeStart = "demo-1/pod-000051"

// startDemo runs the demo on the simulated cluster (one namespace, 50
// pods, 200 events/s, the controller and three counting handlers) until the
// test ends. Before the informer starts it watches watchedBeforeStart.
func startDemo(t *testing.T) *demoUnderTest {
	t.Helper()
	setOTelEnv(t)
	d := &demoUnderTest{t: t, parent: t, client: &http.Client{Timeout: 20 * time.Second}, done: make(chan error, 1)}
	ready := make(chan error, 1)
	cfg := config{
		rate: 200, pods: 50, namespaces: 1, seed: 1,
		interval: time.Second, handlers: 4, workers: 1, logLevel: "off",
		http: "127.0.0.1:0",
		serving: func(url string) {
			d.url = strings.TrimSuffix(url, "/")
			// The server serves already; the informer has not started.
			resp, err := d.client.Get(d.url + "/api/key?key=" + watchedBeforeStart)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("watching %s: %d %s", watchedBeforeStart, resp.StatusCode, b)
				}
			}
			ready <- err
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { d.done <- run(ctx, cfg, &d.out, io.Discard) }()
	select {
	case err := <-ready:
		if err != nil {
			cancel()
			<-d.done
			t.Fatal(err)
		}
	case err := <-d.done:
		cancel()
		t.Fatalf("the demo ended before serving: %v\n%s", err, d.out.String())
	}
	t.Cleanup(d.stop)
	return d
}

// stop ends the demo and waits for it.
func (d *demoUnderTest) stop() {
	d.cancel()
	if err := <-d.done; err != nil {
		d.parent.Errorf("demo: %v", err)
	}
	d.client.CloseIdleConnections()
}

func (d *demoUnderTest) do(method, path, body string) (int, []byte) {
	d.t.Helper()
	req, err := http.NewRequest(method, d.url+path, strings.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, b
}

func (d *demoUnderTest) getJSON(path string, code int, v any) {
	d.t.Helper()
	got, b := d.do(http.MethodGet, path, "")
	if got != code {
		d.t.Fatalf("GET %s: %d, want %d: %s", path, got, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		d.t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

func (d *demoUnderTest) snapshot() snapshot {
	d.t.Helper()
	var s snapshot
	d.getJSON("/api/snapshot", http.StatusOK, &s)
	return s
}

// fault posts a fault and checks it was applied.
func (d *demoUnderTest) fault(body string) {
	d.t.Helper()
	code, b := d.do(http.MethodPost, "/api/faults", body)
	var r struct {
		OK      bool   `json:"ok"`
		Message string `json:"message"`
	}
	if code != http.StatusOK || json.Unmarshal(b, &r) != nil || !r.OK || r.Message == "" {
		d.t.Fatalf("POST /api/faults %s: %d %s", body, code, b)
	}
}

// await polls the snapshot until ok accepts it. The bound only keeps a
// broken demo from hanging the test: under load the condition holds
// within a few seconds.
func (d *demoUnderTest) await(what string, ok func(snapshot) bool) snapshot {
	d.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := d.snapshot()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(s, "", " ")
			d.t.Fatalf("never saw %s; last snapshot:\n%s", what, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// awaitTrace polls the page's traces of view ("recent" or "slowest") until
// one matches, and returns it.
func (d *demoUnderTest) awaitTrace(view, what string, match func(traceJSON) bool) traceJSON {
	d.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var r struct{ Traces []traceJSON }
		d.getJSON("/api/traces?view="+view+"&limit=200", http.StatusOK, &r)
		for _, tr := range r.Traces {
			if match(tr) {
				return tr
			}
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("no %s among %d traces", what, len(r.Traces))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func handlerOf(s snapshot, name string) handlerSnapshot {
	for _, h := range s.Handlers {
		if h.Name == name {
			return h
		}
	}
	return handlerSnapshot{}
}

// TestWebAPI runs the demo with its web server and checks the page's data
// API: the snapshot, the stream, traces, the key search, every fault's
// effect and the answers to bad requests.
func TestWebAPI(t *testing.T) {
	d := startDemo(t)

	t.Run("snapshot", func(t *testing.T) {
		d.t = t
		s := d.await("a non-zero rate at every stage and edge", func(s snapshot) bool {
			for _, st := range s.Stages {
				if st.Rate <= 0 {
					return false
				}
			}
			for _, e := range s.Edges {
				if e.Rate <= 0 {
					return false
				}
			}
			return s.Informer.Synced && len(s.Stages) == 7 && s.Controller != nil && s.Controller.ReconcileRate > 0
		})
		want := []string{"reflector/reflector", "fifo/fifo", "indexer/indexer", "controller/listener", "count1/listener", "count2/listener", "count3/listener"}
		for i, st := range s.Stages {
			if got := st.Name + "/" + st.Kind; got != want[i] {
				t.Errorf("stage %d: %s, want %s", i, got, want[i])
			}
		}
		wantEdges := []string{"reflector>fifo", "fifo>indexer", "indexer>controller", "indexer>count1", "indexer>count2", "indexer>count3"}
		for i, e := range s.Edges {
			if i >= len(wantEdges) || e.From+">"+e.To != wantEdges[i] {
				t.Errorf("edge %d: %s>%s, want %v", i, e.From, e.To, wantEdges)
			}
		}
		if s.Mode != "simulated" || !s.FaultsEnabled || s.ClientGo != nil {
			t.Errorf("mode %q, faults %v, clientgo %v", s.Mode, s.FaultsEnabled, s.ClientGo)
		}
		if s.Informer.Lists < 1 || s.Informer.CacheSize == 0 || s.Informer.LastRV == "" {
			t.Errorf("informer: %+v", s.Informer)
		}
		if _, err := time.Parse(time.RFC3339, s.Time); err != nil || s.UptimeS <= 0 {
			t.Errorf("time %q, uptime %v", s.Time, s.UptimeS)
		}
		// Handler latencies: measured within a window, so wait for one
		// with a measured event.
		s = d.await("handler latencies", func(s snapshot) bool {
			h := handlerOf(s, "count1")
			return h.P99ms > 0 && h.DurationP99ms > 0
		})
		for _, h := range s.Handlers {
			if h.P50ms > h.P99ms || h.DurationP50ms > h.DurationP99ms || h.Delivered == 0 || h.Fault != "" {
				t.Errorf("handler %+v", h)
			}
		}
	})

	t.Run("stream", func(t *testing.T) {
		d.t = t
		resp, err := d.client.Get(d.url + "/api/stream")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("Content-Type %q", ct)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var times []string
		event := ""
		for len(times) < 2 && sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				if event != "snapshot" {
					t.Fatalf("data of event %q", event)
				}
				var s snapshot
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &s); err != nil {
					t.Fatalf("data: %v: %s", err, line)
				}
				if len(s.Stages) != 7 {
					t.Errorf("streamed snapshot with %d stages", len(s.Stages))
				}
				times = append(times, fmt.Sprint(s.UptimeS))
			}
		}
		if len(times) < 2 || times[0] == times[1] {
			t.Fatalf("stream gave %v (%v)", times, sc.Err())
		}
	})

	t.Run("traces", func(t *testing.T) {
		d.t = t
		if telemetry.CompiledOut {
			t.Skip("tracing compiled out (actorinformer_notrace)")
		}
		found := d.awaitTrace("slowest", "complete delta trace", func(tr traceJSON) bool {
			return tr.Root == "reflector.receive" && tr.Stages >= 7
		})
		var got traceJSON
		d.getJSON("/api/trace?id="+found.TraceID, http.StatusOK, &got)
		if got.TraceID != found.TraceID || got.Key == "" || got.DurationMs <= 0 {
			t.Errorf("trace %+v", got)
		}
		stages := map[string]bool{}
		ids := map[string]bool{}
		for _, s := range got.Spans {
			stages[s.Stage] = true
			ids[s.SpanID] = true
			if s.StartMs < 0 || s.DurationMs < 0 || s.Attrs == nil || s.Links == nil {
				t.Errorf("span %+v", s)
			}
		}
		for _, s := range got.Spans {
			if s.ParentID != "" && !ids[s.ParentID] {
				t.Errorf("span %s's parent %s is not in the trace", s.Name, s.ParentID)
			}
		}
		for _, want := range []string{"reflector", "fifo", "indexer", "controller", "count1"} {
			if !stages[want] {
				t.Errorf("trace lacks stage %s: %v", want, stages)
			}
		}
		var r struct{ Traces []traceJSON }
		d.getJSON("/api/traces?view=recent&limit=1", http.StatusOK, &r)
		if len(r.Traces) != 1 {
			t.Errorf("limit=1 gave %d traces", len(r.Traces))
		}
	})

	t.Run("trace continues into the controller", func(t *testing.T) {
		d.t = t
		if telemetry.CompiledOut {
			t.Skip("tracing compiled out (actorinformer_notrace)")
		}
		d.awaitTrace("recent", "delta trace with the controller's processing linked in", func(tr traceJSON) bool {
			ids := map[string]bool{}
			for _, s := range tr.Spans {
				ids[s.SpanID] = true
			}
			for _, s := range tr.Spans {
				if s.Name == "workqueue.process" && len(s.Links) > 0 && ids[s.Links[0].SpanID] && s.Links[0].TraceID == tr.TraceID {
					return true
				}
			}
			return false
		})
	})

	t.Run("key", func(t *testing.T) {
		d.t = t
		if telemetry.CompiledOut {
			t.Skip("tracing compiled out (actorinformer_notrace)")
		}
		var k keyJSON
		deadline := time.Now().Add(60 * time.Second)
		for {
			d.getJSON("/api/key?key="+watchedBeforeStart, http.StatusOK, &k)
			if len(k.Deltas) > 0 && len(k.Traces) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no delta of %s: %+v", watchedBeforeStart, k)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !k.Watching || k.Key != watchedBeforeStart || k.Until == "" {
			t.Errorf("%+v", k)
		}
		first := k.Deltas[0]
		if first.Type != "Added" || first.RV == "" || first.TraceID == "" {
			t.Errorf("first delta of a pod created after the watch began: %+v", first)
		}
		for _, tr := range k.Traces {
			if tr.Key != watchedBeforeStart {
				t.Errorf("trace %s of key %s", tr.TraceID, tr.Key)
			}
		}
		if code, b := d.do(http.MethodDelete, "/api/key?key="+watchedBeforeStart, ""); code != http.StatusOK {
			t.Errorf("DELETE: %d %s", code, b)
		}
		if code, b := d.do(http.MethodDelete, "/api/key?key="+watchedBeforeStart, ""); code != http.StatusNotFound {
			t.Errorf("DELETE again: %d %s", code, b)
		}
	})

	t.Run("fault slow", func(t *testing.T) {
		d.t = t
		d.fault(`{"fault":"slow","handler":"count1","delay_ms":50}`)
		s := d.await("count1's backlog rising", func(s snapshot) bool { return handlerOf(s, "count1").Backlog > 20 })
		if f := handlerOf(s, "count1").Fault; f != "slow 50ms" {
			t.Errorf("fault %q", f)
		}
		d.fault(`{"fault":"resume","handler":"count1"}`)
		d.await("count1's backlog drained", func(s snapshot) bool {
			h := handlerOf(s, "count1")
			return h.Backlog < 20 && h.Fault == ""
		})
	})

	t.Run("fault stop", func(t *testing.T) {
		d.t = t
		d.fault(`{"fault":"stop","handler":"count2"}`)
		before := handlerOf(d.snapshot(), "count2").Delivered
		s := d.await("count2's backlog rising", func(s snapshot) bool { return handlerOf(s, "count2").Backlog > 20 })
		// At most the call that was running when it stopped.
		if h := handlerOf(s, "count2"); h.Delivered > before+1 || h.Fault != "stopped" {
			t.Errorf("stopped handler: %+v, delivered %d before", h, before)
		}
		d.fault(`{"fault":"resume","handler":"count2"}`)
		d.await("count2 delivering again", func(s snapshot) bool { return handlerOf(s, "count2").Delivered > before+20 })
	})

	t.Run("fault panic", func(t *testing.T) {
		d.t = t
		d.fault(`{"fault":"panic","handler":"count3","every":2}`)
		s0 := d.snapshot()
		d.await("count3 panicking while the others deliver", func(s snapshot) bool {
			return handlerOf(s, "count3").Panics > 10 &&
				handlerOf(s, "controller").Delivered > handlerOf(s0, "controller").Delivered+20 &&
				handlerOf(s, "count3").Delivered > handlerOf(s0, "count3").Delivered+20
		})
		d.fault(`{"fault":"resume","handler":"count3"}`)
	})

	t.Run("fault cut-watch", func(t *testing.T) {
		d.t = t
		before := d.snapshot().Informer.WatchRestarts
		d.fault(`{"fault":"cut-watch"}`)
		d.await("a watch restart", func(s snapshot) bool { return s.Informer.WatchRestarts > before })
	})

	t.Run("fault gone", func(t *testing.T) {
		d.t = t
		before := d.snapshot().Informer
		d.fault(`{"fault":"gone"}`)
		d.await("a relist", func(s snapshot) bool { return s.Informer.Relists > before.Relists && s.Informer.Lists > before.Lists })
	})

	t.Run("fault burst", func(t *testing.T) {
		d.t = t
		before := d.snapshot().Informer.CacheSize
		d.fault(`{"fault":"burst","count":500}`)
		d.await("the cache growing by the burst", func(s snapshot) bool { return s.Informer.CacheSize >= before+400 })
	})

	t.Run("bad requests", func(t *testing.T) {
		d.t = t
		for _, c := range []struct {
			method, path, body string
			code               int
		}{
			{"POST", "/api/faults", `{`, 400},
			{"POST", "/api/faults", `{"fault":"slow","handler":"count1","delay_ms":5}{}`, 400},
			{"POST", "/api/faults", `{"fault":"explode"}`, 400},
			{"POST", "/api/faults", `{}`, 400},
			{"POST", "/api/faults", `{"fault":"slow","handler":"nobody","delay_ms":5}`, 400},
			{"POST", "/api/faults", `{"fault":"slow","handler":"count1"}`, 400},
			{"POST", "/api/faults", `{"fault":"slow","handler":"count1","delay_ms":3600000}`, 400},
			{"POST", "/api/faults", `{"fault":"panic","handler":"count1","every":0}`, 400},
			{"POST", "/api/faults", `{"fault":"burst","count":100000000}`, 400},
			{"POST", "/api/faults", `{"fault":"burst","count":-1}`, 400},
			{"POST", "/api/faults", `{"fault":"gone","extra":1}`, 400},
			{"POST", "/api/faults", `{"fault":"kill","member":"m1"}`, 400},
			{"POST", "/api/faults", `{"fault":"add"}`, 400},
			{"POST", "/api/faults", `{"fault":"slow","handler":"count1","member":"m1","delay_ms":5}`, 400},
			{"POST", "/api/faults", `{"fault":"` + strings.Repeat("x", 10000) + `"}`, 413},
			{"GET", "/api/faults", "", 405},
			{"POST", "/api/snapshot", "", 405},
			{"GET", "/api/traces?view=oldest", "", 400},
			{"GET", "/api/traces?limit=0", "", 400},
			{"GET", "/api/traces?limit=many", "", 400},
			{"GET", "/api/trace?id=xyz", "", 400},
			{"GET", "/api/trace", "", 400},
			{"GET", "/api/trace?id=0123456789abcdef0123456789abcdef", "", 404},
			{"GET", "/api/key", "", 400},
			{"GET", "/api/key?key=a/b/c", "", 400},
			{"GET", "/api/key?key=/name", "", 400},
			{"GET", "/api/key?key=" + strings.Repeat("n", 600), "", 400},
			{"DELETE", "/api/key?key=ns/never-watched", "", 404},
			{"GET", "/api/nothing", "", 404},
		} {
			code, b := d.do(c.method, c.path, c.body)
			var e struct {
				Error string `json:"error"`
			}
			if code != c.code {
				t.Errorf("%s %.60s %.60s: %d, want %d: %s", c.method, c.path, c.body, code, c.code, b)
			}
			if json.Unmarshal(b, &e) != nil || e.Error == "" {
				t.Errorf("%s %.60s %.60s: no error message: %s", c.method, c.path, c.body, b)
			}
		}
		// Still running.
		d.await("the reflector still receiving", func(s snapshot) bool { return s.Stages[0].Rate > 0 })
	})

	t.Run("page and metrics", func(t *testing.T) {
		d.t = t
		code, b := d.do(http.MethodGet, "/", "")
		if code != http.StatusOK || !bytes.Contains(b, []byte("<html")) {
			t.Errorf("GET /: %d %.200s", code, b)
		}
		code, b = d.do(http.MethodGet, "/metrics", "")
		want := "actorinformer_" // the library's metrics, compiled out with tracing
		if telemetry.CompiledOut {
			want = "target_info"
		}
		if code != http.StatusOK || !bytes.Contains(b, []byte(want)) {
			t.Errorf("GET /metrics: %d %.200s", code, b)
		}
	})
}

// TestFaultsOnlyInSimulatedMode checks that the fault endpoint answers 404
// with a message when the demo watches a real cluster.
func TestFaultsOnlyInSimulatedMode(t *testing.T) {
	a := &api{now: time.Now, done: make(chan struct{})}
	srv := httptest.NewServer(a.routes())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/api/faults", "application/json", strings.NewReader(`{"fault":"cut-watch"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "simulated") {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestWebFlags(t *testing.T) {
	cfg, err := parseFlags(nil, env(), io.Discard)
	if err != nil || cfg.http != "127.0.0.1:8080" || !cfg.noMetrics || len(cfg.faults) != 0 {
		t.Errorf("defaults: http %q, no metrics %v, faults %v (err %v)", cfg.http, cfg.noMetrics, cfg.faults, err)
	}
	cfg, err = parseFlags([]string{"--http", "", "--metrics", "--fault", "cut-watch@2s", "--fault", "burst=10"}, env(), io.Discard)
	if err != nil || cfg.http != "" || cfg.noMetrics || len(cfg.faults) != 2 || cfg.faults[1].req.Count != 10 {
		t.Errorf("http %q, no metrics %v, faults %+v (err %v)", cfg.http, cfg.noMetrics, cfg.faults, err)
	}
}

// TestFaultFlag runs the demo with --fault burst and checks its pods were
// created: the cache ends larger than the population the workload keeps.
func TestFaultFlag(t *testing.T) {
	setOTelEnv(t, "OTEL_TRACES_EXPORTER", "none")
	f, err := parseFault("burst=300")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config{rate: 50, pods: 20, namespaces: 1, seed: 1, duration: 1500 * time.Millisecond, interval: 500 * time.Millisecond,
		handlers: 1, logLevel: "off", faults: []scheduledFault{f}}
	var out bytes.Buffer
	if err := run(context.Background(), cfg, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`workload after the initial 20 pods: (\d+) creates`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no workload totals:\n%s", out.String())
	}
	if n, _ := strconv.Atoi(m[1]); n < 300 {
		t.Errorf("%d creates, want the burst's 300 at least:\n%s", n, out.String())
	}
}

func TestParseFault(t *testing.T) {
	for _, c := range []struct {
		in      string
		kind    string
		count   int
		member  string
		seconds int
		every   time.Duration
		bad     bool
	}{
		{in: "cut-watch", kind: "cut-watch"},
		{in: "gone@30s", kind: "gone", every: 30 * time.Second},
		{in: "burst", kind: "burst"},
		{in: "burst=500@5s", kind: "burst", count: 500, every: 5 * time.Second},
		{in: "burst=0", bad: true},
		{in: "gone=3", bad: true},
		{in: "cut-watch@1ms", bad: true},
		{in: "slow", bad: true},
		{in: "", bad: true},
		{in: "kill", kind: "kill"},
		{in: "kill=m2@20s", kind: "kill", member: "m2", every: 20 * time.Second},
		{in: "leave=m1", kind: "leave", member: "m1"},
		{in: "add@30s", kind: "add", every: 30 * time.Second},
		{in: "partition", kind: "partition"},
		{in: "partition=5s", kind: "partition", seconds: 5},
		{in: "partition=m3:15s", kind: "partition", member: "m3", seconds: 15},
		{in: "kill=", bad: true},
		{in: "add=2", bad: true},
		{in: "partition=m3", bad: true},
		{in: "partition=:5s", bad: true},
		{in: "partition=1500ms", bad: true},
		{in: "partition=2m", bad: true},
	} {
		f, err := parseFault(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("%q: no error", c.in)
			}
			continue
		}
		if err != nil || f.req.Fault != c.kind || f.req.Count != c.count || f.req.Member != c.member || f.req.Seconds != c.seconds || f.every != c.every {
			t.Errorf("%q: %+v, %v", c.in, f, err)
		}
		if want := f.memberFault() && c.kind != "add" && c.member == ""; f.anyMember != want {
			t.Errorf("%q: any member %v, want %v", c.in, f.anyMember, want)
		}
	}
}

// syncBuffer is a bytes.Buffer for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStreamEndsWithTheDemo checks that an open stream ends when the demo
// stops, rather than keeping the server (and the demo) from stopping.
func TestStreamEndsWithTheDemo(t *testing.T) {
	d := startDemo(t)
	resp, err := d.client.Get(d.url + "/api/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() || sc.Text() != "event: snapshot" {
		t.Fatalf("first line %q (%v)", sc.Text(), sc.Err())
	}
	d.cancel()
	for sc.Scan() {
	}
	if err := sc.Err(); err != nil {
		t.Errorf("stream ended with %v, want EOF", err)
	}
}
