//go:build !race

// Several protoactor cluster members in one process: see members_test.go
// for why this file is not built with the race detector.

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/actorinformer/actorinformer/telemetry"
)

// membersShotFlag, when set, is where TestBrowserMembers writes the members
// panel's screenshot after the kill, for the README (docs/demo-members.png):
//
//	go test ./cmd/demo/ -run TestBrowserMembers -demo.members-screenshot "$PWD/docs/demo-members.png"
var membersShotFlag = flag.String("demo.members-screenshot", "", "TestBrowserMembers: also write the members panel's screenshot (PNG) to this path")

// TestBrowserMembers runs the demo with three members on the simulated
// cluster, opens its page in headless Chromium and checks the members
// panel: three live members whose ranges cover every range exactly once,
// on the ring and in the table; after kill member from the page, the two
// survivors own every range and their caches add up to the cluster's pods,
// and the handover timeline shows the takeovers. A waterfall names its
// member and range, and the key search names the key's owner and shows its
// range's handover spans. It saves a screenshot of the members panel.
func TestBrowserMembers(t *testing.T) {
	if telemetry.CompiledOut {
		t.Skip("built with actorinformer_notrace: no traces, so no waterfall and no handover span on the page")
	}
	ctx := openBrowser(t)
	d := startSharded(t, 3, time.Second)
	stepCtx, stepCancel := context.WithTimeout(ctx, 90*time.Second)
	defer stepCancel()
	defer func() {
		if t.Failed() {
			saveScreenshot(t, ctx, "demo-members-failed.png")
		}
	}()
	if err := chromedp.Do(stepCtx, chromedp.Navigate(d.url+"/")); err != nil {
		t.Fatalf("open %s: %v", d.url, err)
	}

	// Three live members; the ring's 16 segments and the table's ranges
	// each cover every range exactly once.
	cover, err := chromedp.Run(stepCtx, chromedp.Poll[string](membersCover+`(["m1", "m2", "m3"])`,
		chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil {
		t.Fatalf("members panel: not 3 live members covering the 16 ranges once: %v\n%s", err, pageText(ctx, "#members-section"))
	}
	t.Logf("before the kill: %s", cover)
	rangesOfM2, err := chromedp.Run(stepCtx, chromedp.Evaluate[string](`document.querySelector('#members tr[data-member="m2"]').dataset.ranges`))
	if err != nil || rangesOfM2 == "" {
		t.Fatalf("m2's ranges: %q, %v", rangesOfM2, err)
	}

	// Kill m2 from the page.
	killed := time.Now()
	if err := chromedp.Do(stepCtx, chromedp.Click(chromedp.CSS(`#members tr[data-member="m2"] button[data-fault="kill"]`))); err != nil {
		t.Fatalf("kill m2: %v", err)
	}
	msg, err := chromedp.Run(stepCtx, chromedp.Poll[string](`(() => {
		const p = document.getElementById("member-fault-message");
		return p.textContent && !p.textContent.startsWith("sending") && p.className + ": " + p.textContent;
	})()`))
	if err != nil || !strings.HasPrefix(msg, "ok: member m2 killed") {
		t.Fatalf("kill m2 from the page: %q, %v", msg, err)
	}
	cover, err = chromedp.Run(stepCtx, chromedp.Poll[string](`(() => {
		const m2 = document.querySelector('#members tr[data-member="m2"]');
		if (!m2 || m2.dataset.state !== "killed") return false;
		const cover = `+membersCover+`(["m1", "m3"]);
		const check = document.getElementById("shard-check");
		return cover && check.dataset.equal === "true" && cover + "; " + document.querySelector("#shard-totals").textContent.trim();
	})()`, chromedp.WithPollingInterval(100*time.Millisecond)))
	if err != nil {
		t.Fatalf("after the kill, m1 and m3 do not serve every range once with the caches adding up: %v\n%s", err, pageText(ctx, "#members-section"))
	}
	t.Logf("%s after the kill (provider TTL 1s): %s", time.Since(killed).Round(10*time.Millisecond), cover)

	// The timeline: a takeover from m2 for each of its ranges.
	moves, err := chromedp.Run(stepCtx, chromedp.Poll[[]string](`(() => {
		const want = `+fmt.Sprintf("%q", rangesOfM2)+`.split(",");
		const rows = [...document.querySelectorAll('#handovers tr[data-kind="takeover"][data-from="m2"]')];
		const ranges = new Set(rows.map((r) => r.dataset.range));
		if (!want.every((r) => ranges.has(r))) return false;
		if (!rows.every((r) => r.dataset.to === "m1" || r.dataset.to === "m3")) return false;
		return rows.map((r) => r.textContent);
	})()`, chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil {
		t.Fatalf("the timeline lacks a takeover from m2 of each of its ranges %s: %v\n%s", rangesOfM2, err, pageText(ctx, "#handovers"))
	}
	t.Logf("timeline: %d takeovers from m2, first %q", len(moves), moves[0])

	// The members panel after the kill, for the README.
	if err := chromedp.Do(stepCtx, chromedp.ScrollIntoView(chromedp.ID("members-section"))); err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(stepCtx, chromedp.Screenshot(chromedp.ID("members-section")))
	if err != nil {
		t.Fatalf("screenshot of the members panel: %v", err)
	}
	savePNG(t, "demo-members.png", shot)
	if *membersShotFlag != "" {
		if err := os.WriteFile(*membersShotFlag, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("README screenshot written to %s (%d bytes)", *membersShotFlag, len(shot))
	}

	// A waterfall names its member and range.
	wf, err := chromedp.Run(stepCtx, chromedp.Poll[string](`(() => {
		for (const w of document.querySelectorAll("#traces .waterfall")) {
			const m = w.querySelector(".wf-member"), r = w.querySelector(".wf-range");
			if (m && r && w.dataset.key && (m.dataset.member === "m1" || m.dataset.member === "m3")) return w.dataset.key + " " + m.textContent + " " + r.textContent;
		}
		return false;
	})()`, chromedp.WithPollingInterval(200*time.Millisecond)))
	if err != nil {
		t.Fatalf("no waterfall names a live member and a range: %v\n%s", err, pageText(ctx, "#traces"))
	}
	t.Logf("waterfall: %s", wf)

	// The key search: the owner, and its range's handover spans. The keys
	// come from waterfalls that name a live member and a range: the
	// members' lease watches are traced too, and their renewals can fill
	// the page's recent traces, but a lease is in no range.
	keys, err := pageKeys(stepCtx, `(w) => { const m = w.querySelector(".wf-member"); return m && (m.dataset.member === "m1" || m.dataset.member === "m3") && w.querySelector(".wf-range"); }`,
		chromedp.WithPollingInterval(200*time.Millisecond))
	if err != nil {
		t.Fatalf("no waterfall names an object key in a range of m1 or m3: %v\n%s", err, pageText(ctx, "#traces"))
	}
	var owner string
	for _, key := range keys {
		if err := chromedp.Do(stepCtx,
			chromedp.SetValue(chromedp.ID("key-input"), key),
			chromedp.Click(chromedp.ID("key-go")),
		); err != nil {
			t.Fatal(err)
		}
		keyCtx, keyCancel := context.WithTimeout(stepCtx, 10*time.Second)
		owner, err = chromedp.Run(keyCtx, chromedp.Poll[string](`(() => {
			const p = document.getElementById("key-owner");
			const spans = [...document.querySelectorAll("#key-handovers .waterfall")].map((w) => w.querySelector(".wf-root").textContent);
			const status = document.getElementById("key-status").textContent;
			return status.startsWith(`+fmt.Sprintf("%q", key)+`) && (p.dataset.owner === "m1" || p.dataset.owner === "m3") &&
				spans.length > 0 && spans.every((s) => s === "shard.acquire" || s === "shard.release") &&
				p.textContent + " | " + spans.join(", ");
		})()`, chromedp.WithPollingInterval(200*time.Millisecond)))
		keyCancel()
		if err == nil {
			t.Logf("key %s: %s", key, owner)
			break
		}
		t.Logf("key %s: no owner and handover spans on the page (%v); the workload may have deleted it, trying another\n%s", key, err, pageText(ctx, "#key-section"))
	}
	if owner == "" {
		t.Fatalf("none of the keys %v shows its owner and its range's handovers", keys)
	}
	if err := chromedp.Do(stepCtx, chromedp.ScrollIntoView(chromedp.ID("key-section"))); err != nil {
		t.Fatal(err)
	}
	saveScreenshot(t, ctx, "demo-members-page.png")
}

// membersCover is a JavaScript function of the member names that must be
// live: a description of the ranges when the members table lists them live
// and their ranges, and the ring's segments, cover every range exactly once
// between them; else false.
const membersCover = `((names) => {
	const segs = [...document.querySelectorAll("#ring path[data-range]")];
	if (segs.length !== 16) return false;
	if (!segs.every((s) => names.includes(s.dataset.owner))) return false;
	const seen = [];
	const parts = [];
	for (const n of names) {
		const tr = document.querySelector('#members tr[data-member="' + n + '"]');
		if (!tr || tr.dataset.state !== "live" || !tr.dataset.ranges) return false;
		const rs = tr.dataset.ranges.split(",").map(Number);
		for (const r of rs) {
			if (seen[r]) return false;
			seen[r] = true;
			const seg = document.querySelector('#ring path[data-range="' + r + '"]');
			if (!seg || seg.dataset.owner !== n) return false;
		}
		parts.push(n + " " + rs.length);
	}
	for (let r = 0; r < 16; r++) if (!seen[r]) return false;
	return parts.join(", ");
})`

// savePNG writes png into $ACTORINFORMER_ARTIFACTS or the test's temporary
// directory, and logs the path.
func savePNG(t *testing.T, name string, png []byte) {
	t.Helper()
	dir := os.Getenv("ACTORINFORMER_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("artifacts directory: %v", err)
		return
	}
	path := dir + "/" + name
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}
