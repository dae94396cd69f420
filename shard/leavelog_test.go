package shard_test

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/actors"
	"github.com/actorinformer/actorinformer/shard"
)

// A graceful leave logs one line as it starts, at Info, with the member,
// the group, the ranges it delivers and how long it may take (the leave
// timeout).
func TestLeaveIsLogged(t *testing.T) {
	src := newMemServer()
	src.create("o1")
	var logs syncBuffer
	c, prov := startCluster(newGroup(t, nil).agent)
	defer stopCluster(c, prov)
	inf, err := shard.New(c, "configmaps", src, &corev1.ConfigMap{}, append(testLeases(), shard.WithRanges(4),
		shard.WithInformerOptions(actors.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	if !cache.WaitForCacheSync(timeoutCh(30*time.Second), inf.HasSynced) {
		cancel()
		<-done
		t.Fatal("not synced")
	}
	if strings.Contains(logs.String(), "leaving the group") {
		t.Fatalf("a leave was logged before the member left:\n%s", logs.String())
	}
	member := inf.Member()
	cancel()
	<-done
	var lines []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "leaving the group gracefully") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d lines for the leave's start, want 1:\n%s", len(lines), logs.String())
	}
	for _, want := range []string{"level=INFO", "group=configmaps", "member=" + regexp.QuoteMeta(member), "delivered=4", `ranges="\[0 1 2 3\]"`, "leaveTimeout=30s"} {
		if !regexp.MustCompile(want).MatchString(lines[0]) {
			t.Errorf("the leave's line lacks %s: %s", want, lines[0])
		}
	}
}
