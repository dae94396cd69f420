package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/actorinformer/actorinformer/telemetry"
)

// screenshotFlag, when set, is where TestBrowserPage writes the page's
// screenshot for the README (docs/demo-page.png):
//
//	go test ./cmd/demo/ -run TestBrowserPage -demo.screenshot "$PWD/docs/demo-page.png"
var screenshotFlag = flag.String("demo.screenshot", "", "TestBrowserPage: also write the page's screenshot (PNG) to this path")

// browserNames are the executables tried for the headless browser, Debian's
// chromium first.
var browserNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"}

// noBrowser skips the test, or fails it when ACTORINFORMER_REQUIRE_BROWSER=1
// (hack/test.sh), where a missing browser is a broken CI machine.
func noBrowser(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("ACTORINFORMER_REQUIRE_BROWSER") == "1" {
		t.Fatalf("ACTORINFORMER_REQUIRE_BROWSER=1 but %s", msg)
	}
	t.Skip(msg + " (set ACTORINFORMER_REQUIRE_BROWSER=1 to fail instead)")
}

// TestBrowserPage runs the demo on the simulated cluster with its web page,
// opens the page in headless Chromium and checks what a user would look at:
// every stage of the actor graph shows a non-zero rate, a trace's waterfall
// spans at least 4 stages and a click on a span shows its attributes, a key
// typed in the search box shows its deltas, and the slow fault injected from
// the page makes that handler's backlog rise on the page. It saves a
// screenshot of the page as an artifact.
func TestBrowserPage(t *testing.T) {
	if telemetry.CompiledOut {
		t.Skip("built with actorinformer_notrace: no traces, so no waterfall and no key's deltas on the page")
	}
	ctx := openBrowser(t)
	base := startBrowserDemo(t)
	// Every step below waits at most this long in all.
	stepCtx, stepCancel := context.WithTimeout(ctx, 75*time.Second)
	defer stepCancel()
	defer func() {
		if t.Failed() {
			saveScreenshot(t, ctx, "demo-page-failed.png")
		}
	}()
	if err := chromedp.Do(stepCtx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatalf("open %s: %v", base, err)
	}

	// The graph: every stage of the API's snapshot is on the page, with a
	// non-zero rate on its box and on the edge into it.
	var snap struct {
		Stages []struct{ Name, Kind string }
	}
	getJSON(t, stepCtx, base+"/api/snapshot", &snap)
	if len(snap.Stages) < 4 {
		t.Fatalf("snapshot has %d stages, want reflector, fifo, indexer and listeners", len(snap.Stages))
	}
	stageNames := make([]string, len(snap.Stages))
	for i, s := range snap.Stages {
		stageNames[i] = s.Name
	}
	stagesJSON, _ := json.Marshal(stageNames)
	live, err := chromedp.Run(stepCtx, chromedp.Poll[[]string](`(() => {
		const want = `+string(stagesJSON)+`;
		const num = (n) => n ? parseFloat(n.textContent.replace(/,/g, "")) : NaN;
		const rates = [];
		for (const name of want) {
			const g = document.querySelector('#graph g[data-stage="' + name + '"]');
			if (!g || !(num(g.querySelector('[data-field="rate"]')) > 0)) return false;
			rates.push(name + " " + g.querySelector('[data-field="rate"]').textContent);
		}
		const edges = [...document.querySelectorAll("#graph [data-edge]")];
		if (edges.length < want.length - 1 || !edges.every((e) => num(e) > 0)) return false;
		return rates;
	})()`, chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil {
		t.Fatalf("graph: not every stage of %v shows a non-zero rate: %v\n%s", stageNames, err, pageText(ctx, "#graph"))
	}
	t.Logf("graph rates: %s", strings.Join(live, ", "))

	// A waterfall of at least 4 stages; a click on a span shows its
	// attributes.
	traceID, err := chromedp.Run(stepCtx, chromedp.Poll[string](waterfallWithStages+`("#traces", 4)`,
		chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil {
		t.Fatalf("no waterfall with 4 stages: %v\n%s", err, pageText(ctx, "#traces-section"))
	}
	// Pause the list so that the waterfall stays while it is clicked.
	if err := chromedp.Do(stepCtx, chromedp.Click(chromedp.ID("traces-pause"))); err != nil {
		t.Fatal(err)
	}
	traceID, err = chromedp.Run(stepCtx, chromedp.Poll[string](waterfallWithStages+`("#traces", 4)`))
	if err != nil {
		t.Fatalf("waterfall gone after pause: %v", err)
	}
	handlerSpan := chromedp.CSS(fmt.Sprintf(`#traces .waterfall[data-trace-id=%q] .span-row[data-span-name="handler"]`, traceID))
	if err := chromedp.Do(stepCtx, chromedp.Click(handlerSpan)); err != nil {
		t.Fatalf("click a handler span of trace %s: %v", traceID, err)
	}
	attr, err := chromedp.Run(stepCtx, chromedp.Poll[string](
		`(document.querySelector('#span-detail dd[data-attr="actorinformer.handler.name"]') || {}).textContent`))
	if err != nil {
		t.Fatalf("the clicked handler span shows no handler name: %v\n%s", err, pageText(ctx, "#span-detail"))
	}
	t.Logf("waterfall of trace %s; its handler span's attributes name handler %q", traceID, attr)
	if err := chromedp.Do(stepCtx, chromedp.Click(chromedp.ID("traces-pause"))); err != nil {
		t.Fatal(err)
	}

	// A key from the workload: its deltas appear under the search box.
	keys, err := pageKeys(stepCtx, `(w) => true`)
	if err != nil {
		t.Fatalf("no waterfall names an object key: %v", err)
	}
	t.Logf("%s: keys of the latest traces on the page: %v", time.Now().UTC().Format("15:04:05.000"), keys)
	var deltas []string
	for _, key := range keys {
		if err := chromedp.Do(stepCtx,
			chromedp.SetValue(chromedp.ID("key-input"), key),
			chromedp.Click(chromedp.ID("key-go")),
		); err != nil {
			t.Fatal(err)
		}
		keyCtx, keyCancel := context.WithTimeout(stepCtx, 10*time.Second)
		deltas, err = chromedp.Run(keyCtx, chromedp.Poll[[]string](`(() => {
			const rows = [...document.querySelectorAll("#key-deltas tbody tr[data-delta]")];
			const status = document.getElementById("key-status").textContent;
			return rows.length > 0 && status.startsWith(`+strconv.Quote(key)+`) && rows.map((r) => r.textContent);
		})()`, chromedp.WithPollingInterval(200*time.Millisecond)))
		keyCancel()
		if err == nil {
			t.Logf("key %s: %d deltas on the page, first %q", key, len(deltas), deltas[0])
			break
		}
		t.Logf("key %s: no delta on the page (%v); the workload may have deleted it, trying another\n%s", key, err, pageText(ctx, "#key-section"))
	}
	if len(deltas) == 0 {
		t.Fatalf("none of the keys %v shows a delta\n%s", keys, pageText(ctx, "#key-section"))
	}

	// The slow fault from the page: the handler's backlog rises on the page.
	const slow = browserSlowHandler
	row := fmt.Sprintf(`#handlers tr[data-handler=%q]`, slow)
	// First a delay the API refuses: its error shows as text.
	if err := chromedp.Do(stepCtx,
		chromedp.WaitVisible(chromedp.ID("global-faults")),
		chromedp.SetValue(chromedp.CSS(row+` input[data-input="delay_ms"]`), "0"),
		chromedp.Click(chromedp.CSS(row+` button[data-fault="slow"]`)),
	); err != nil {
		t.Fatalf("fault buttons: %v\n%s", err, pageText(ctx, "#handlers-section"))
	}
	refused, err := chromedp.Run(stepCtx, chromedp.Poll[string](`(() => {
		const p = document.getElementById("fault-message");
		return p.className === "error" && p.textContent;
	})()`))
	if err != nil || !strings.Contains(refused, "400") || !strings.Contains(refused, "delay_ms") {
		t.Fatalf("a slow fault of 0 ms: page shows %q, %v; want the API's 400 and its message", refused, err)
	}
	t.Logf("refused fault shown as: %s", refused)
	if err := chromedp.Do(stepCtx,
		chromedp.SetValue(chromedp.CSS(row+` input[data-input="delay_ms"]`), "50"),
		chromedp.Click(chromedp.CSS(row+` button[data-fault="slow"]`)),
	); err != nil {
		t.Fatalf("inject the slow fault on %s: %v\n%s", slow, err, pageText(ctx, "#handlers-section"))
	}
	msg, err := chromedp.Run(stepCtx, chromedp.Poll[string](`(() => {
		const p = document.getElementById("fault-message");
		return p.textContent && !p.textContent.startsWith("sending") && p.className + ": " + p.textContent;
	})()`))
	if err != nil || !strings.HasPrefix(msg, "ok: ") {
		t.Fatalf("slow fault on %s: %q, %v", slow, msg, err)
	}
	backlog, err := chromedp.Run(stepCtx, chromedp.Poll[[]float64](`(() => {
		const num = (n) => n ? parseFloat(n.textContent.replace(/^\D+/, "").replace(/,/g, "")) : NaN;
		const cell = num(document.querySelector('`+row+` [data-field="backlog"]'));
		const box = num(document.querySelector('#graph g[data-stage=`+strconv.Quote(slow)+`] [data-field="backlog"]'));
		return cell >= 200 && box >= 200 && [cell, box];
	})()`, chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil {
		t.Fatalf("%s's backlog did not rise on the page after the slow fault (%s): %v\n%s", slow, msg, err, pageText(ctx, "#handlers"))
	}
	t.Logf("slow fault (%s): %s's backlog on the page %v (table, graph)", msg, slow, backlog)

	shot := saveScreenshot(t, ctx, "demo-page.png")
	if *screenshotFlag != "" {
		if err := os.WriteFile(*screenshotFlag, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("README screenshot written to %s (%d bytes)", *screenshotFlag, len(shot))
	}
}

// openBrowser starts headless Chromium for the test, which closes it when
// it ends, or skips the test when there is none.
func openBrowser(t *testing.T) context.Context {
	t.Helper()
	browser := ""
	for _, name := range browserNames {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		noBrowser(t, "no Chromium found (%s)", strings.Join(browserNames, ", "))
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(browser),
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.WindowSize(1100, 1250),
		)...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		// Close the browser gracefully, then wait for its process.
		closeCtx, c := context.WithTimeout(ctx, 10*time.Second)
		defer c()
		_ = chromedp.Cancel(closeCtx)
		cancel()
		cancelAlloc()
	})
	// The first Run starts the browser; it must not have a deadline.
	if err := chromedp.Do(ctx); err != nil {
		noBrowser(t, "%s does not start: %v", browser, err)
	}
	return ctx
}

// browserSlowHandler is the handler the test slows down from the page: one
// of the demo's counters.
const browserSlowHandler = "count1"

// startBrowserDemo runs the demo as `go run ./cmd/demo --http 127.0.0.1:0`
// would, on the simulated cluster with the in-memory traces (1% of deltas,
// every delta of a key watched on the page), and returns the page's URL
// without its trailing slash. The demo stops when the test ends.
func startBrowserDemo(t *testing.T) string {
	t.Helper()
	setOTelEnv(t)
	urls := make(chan string, 1)
	cfg := config{
		http: "127.0.0.1:0", serving: func(url string) { urls <- url },
		// 200 pods changed 200 times a second: each lives about 5 s and
		// changes every 1.7 s, so a key taken from a recent trace soon
		// shows a delta once watched.
		rate: 200, pods: 200, namespaces: 2, seed: 1,
		interval: time.Second, handlers: 3, workers: 1, logLevel: "error",
	}
	var out lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, &out, &out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("demo: %v", err)
		}
		if t.Failed() {
			t.Logf("demo output:\n%s", out.String())
		}
	})
	select {
	case url := <-urls:
		return strings.TrimSuffix(url, "/")
	case err := <-done:
		done <- err // for the cleanup
		t.Fatalf("the demo ended before serving its page: %v\n%s", err, out.String())
		return ""
	}
}

// lockedBuffer is a bytes.Buffer that the demo writes while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waterfallWithStages is a JavaScript function of a container selector and a
// stage count: the trace ID of the first waterfall in the container whose
// spans cover that many distinct stages, else false.
const waterfallWithStages = `((sel, n) => {
	for (const w of document.querySelectorAll(sel + " .waterfall")) {
		const stages = new Set([...w.querySelectorAll(".span-row")].map((r) => r.dataset.stage).filter(Boolean));
		if (stages.size >= n) return w.dataset.traceId;
	}
	return false;
})`

// pageKeys returns the object keys of the waterfalls on the page whose
// delta is a watch event that leaves the object in place (Added, Updated)
// and for which where (a JavaScript function of the waterfall element)
// holds, latest delta first: pods the workload has just changed, and
// likely to change again soon. (A list's Replaced deltas may be of pods
// long gone.)
func pageKeys(ctx context.Context, where string, opts ...chromedp.PollOption) ([]string, error) {
	return chromedp.Run(ctx, chromedp.Poll[[]string](`(() => {
		const where = `+where+`;
		const ws = [...document.querySelectorAll("#traces .waterfall[data-key]")]
			.filter((w) => w.dataset.key && (w.dataset.deltaType === "Added" || w.dataset.deltaType === "Updated"))
			.filter(where)
			.sort((a, b) => Date.parse(b.dataset.start) - Date.parse(a.dataset.start));
		const keys = [...new Set(ws.map((w) => w.dataset.key))];
		return keys.length > 0 && keys.slice(0, 5);
	})()`, opts...))
}

// saveScreenshot captures the viewport as PNG into $ACTORINFORMER_ARTIFACTS
// (CI keeps it) or the test's temporary directory, and logs the path.
func saveScreenshot(t *testing.T, ctx context.Context, name string) []byte {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Errorf("screenshot: %v", err)
		return nil
	}
	dir := os.Getenv("ACTORINFORMER_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("artifacts directory: %v", err)
		return png
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot: %v", err)
		return png
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
	return png
}

// pageText is the visible text of the page's element sel, for failure
// messages.
func pageText(ctx context.Context, sel string) string {
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(tctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ""`, sel)))
	if err != nil {
		return "page text: " + err.Error()
	}
	return "page " + sel + ":\n" + s
}

// getJSON decodes the JSON answer of a GET.
func getJSON(t *testing.T, ctx context.Context, url string, v any) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
