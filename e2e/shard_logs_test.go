//go:build !race

// Member processes, built without -race (buildMember): under -race the
// detector would check only this test's harness, not our code, so
// hack/test.sh runs these tests in its step without -race, beside the
// nemesis.

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorinformer/actorinformer/internal/shardproc"
	"github.com/actorinformer/actorinformer/internal/testcluster"
)

// What member processes log at the library's default settings (klog, the
// default verbosity, protoactor's logs through actors.NewActorSystem's
// logger factory): a start, a peer's SIGKILL, a graceful leave. Lines per
// minute of each phase are logged; a start must log no dead letter, a
// graceful leave no error on either side, a start neither, and no line may
// carry a colour.
func TestShardMemberLogs(t *testing.T) {
	c := startCluster(t, testcluster.Options{FeatureGates: "ShardedListAndWatch=true"})
	r := &shardRun{t: t, c: c, cs: clientFor(t, c.Config()), bin: buildMember(t), ns: "shards",
		prefix: fmt.Sprintf("/actorinformer-shard-logs/%d", time.Now().UnixNano()), ranges: 16}
	ctx := context.Background()
	if _, err := r.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := r.cs.CoreV1().ConfigMaps(r.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("o%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// quiet is how long each phase goes on after the members settled: what
	// a member logs meanwhile belongs to the phase.
	const quiet = 5 * time.Second
	m1, m2, m3 := r.join(), r.join(), r.join()
	r.waitFor(90*time.Second, "three members settled", r.settled)
	time.Sleep(quiet)
	start := map[string]logCount{}
	for _, m := range []*shardproc.Proc{m1, m2, m3} {
		start[m.Name] = countLog(t, m, 0)
	}
	startCounted := time.Now()

	killedAt := time.Now()
	marks := map[string]int{m2.Name: start[m2.Name].lines, m3.Name: start[m3.Name].lines}
	m1.Kill()
	r.drop(m1)
	r.waitFor(90*time.Second, "the survivors settled", r.settled)
	time.Sleep(quiet)
	kill := map[string]logCount{}
	for _, m := range []*shardproc.Proc{m2, m3} {
		kill[m.Name] = countLog(t, m, marks[m.Name])
	}
	killWindow := time.Since(killedAt)

	leftAt := time.Now()
	marks = map[string]int{m2.Name: marks[m2.Name] + kill[m2.Name].lines, m3.Name: marks[m3.Name] + kill[m3.Name].lines}
	m2.Terminate()
	r.drop(m2)
	r.waitFor(90*time.Second, "the last member settled", r.settled)
	if !m2.Stop(60 * time.Second) {
		t.Fatalf("%s did not exit", m2.Name)
	}
	time.Sleep(quiet)
	leave := map[string]logCount{}
	for _, m := range []*shardproc.Proc{m2, m3} {
		leave[m.Name] = countLog(t, m, marks[m.Name])
	}
	leaveWindow := time.Since(leftAt)

	for _, m := range []*shardproc.Proc{m1, m2, m3} {
		c := start[m.Name]
		window := startCounted.Sub(m.Start)
		t.Logf("start, %s: %s in %v (%.0f lines/min)", m.Name, c, window.Round(time.Second), perMinute(c.lines, window))
		if c.deadLetters > 0 || c.errors > 0 {
			t.Errorf("%s's start logged %d dead letters and %d errors:\n%s", m.Name, c.deadLetters, c.errors, c.sample)
		}
	}
	for _, m := range []*shardproc.Proc{m2, m3} {
		c := kill[m.Name]
		t.Logf("SIGKILL of %s, on %s: %s in %v (%.0f lines/min)", m1.Name, m.Name, c, killWindow.Round(time.Second), perMinute(c.lines, killWindow))
	}
	for _, m := range []*shardproc.Proc{m2, m3} {
		c := leave[m.Name]
		t.Logf("graceful leave of %s, on %s: %s in %v (%.0f lines/min)", m2.Name, m.Name, c, leaveWindow.Round(time.Second), perMinute(c.lines, leaveWindow))
		if c.errors > 0 {
			t.Errorf("the graceful leave of %s logged %d error lines on %s:\n%s", m2.Name, c.errors, m.Name, c.sample)
		}
	}
	for _, m := range []*shardproc.Proc{m1, m2, m3} {
		b, _ := os.ReadFile(m.Log)
		if strings.Contains(string(b), "\x1b[") {
			t.Errorf("%s's log has ANSI colour codes:\n%s", m.Name, shardproc.Tail(m.Log, 5))
		}
		for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			if l != "" && !klogHeader.MatchString(l) {
				t.Errorf("%s logged a line without klog's header (level, date, time to the microsecond): %q", m.Name, l)
				break
			}
		}
	}
	r.checkLogs()
	saveLogs(t, "shard-logs", r.all)
}

// saveLogs copies the members' logs to $ACTORINFORMER_ARTIFACTS, if set,
// as PREFIX-MEMBER.log.
func saveLogs(t *testing.T, prefix string, members []*shardproc.Proc) {
	dir := os.Getenv("ACTORINFORMER_ARTIFACTS")
	if dir == "" {
		return
	}
	for _, m := range members {
		b, _ := os.ReadFile(m.Log)
		p := filepath.Join(dir, prefix+"-"+m.Name+".log")
		if err := os.MkdirAll(dir, 0o755); err == nil && os.WriteFile(p, b, 0o644) == nil {
			t.Logf("%s's log: %s", m.Name, p)
		}
	}
}

// klogHeader is the start of a klog text line: level, MMDD, time with
// microseconds.
var klogHeader = regexp.MustCompile(`^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6} `)

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

type logCount struct {
	lines, errors, warnings, deadLetters int
	sample                               string // the error or dead-letter lines, up to 10
}

func (c logCount) String() string {
	return fmt.Sprintf("%d lines (%d errors, %d warnings, %d dead letters)", c.lines, c.errors, c.warnings, c.deadLetters)
}

// countLog counts the lines of a member's log after its first skip ones,
// by level, whatever the format: klog's (E… W…), protoactor's default
// (tint's ERR, WRN) or slog's text (level=ERROR).
func countLog(t *testing.T, m *shardproc.Proc, skip int) logCount {
	t.Helper()
	b, err := os.ReadFile(m.Log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		lines = nil
	}
	var c logCount
	var sample []string
	for _, raw := range lines[min(skip, len(lines)):] {
		l := ansi.ReplaceAllString(raw, "")
		c.lines++
		isErr := strings.HasPrefix(l, "E") && klogHeader.MatchString(l) || strings.Contains(l, " ERR ") || strings.Contains(l, "level=ERROR")
		isWarn := strings.HasPrefix(l, "W") && klogHeader.MatchString(l) || strings.Contains(l, " WRN ") || strings.Contains(l, "level=WARN")
		dead := strings.Contains(l, "DeadLetter")
		switch {
		case isErr:
			c.errors++
		case isWarn:
			c.warnings++
		}
		if dead {
			c.deadLetters++
		}
		if (isErr || dead) && len(sample) < 10 {
			sample = append(sample, l)
		}
	}
	c.sample = strings.Join(sample, "\n")
	return c
}

func perMinute(n int, d time.Duration) float64 { return float64(n) / d.Minutes() }
