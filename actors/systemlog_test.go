package actors_test

import (
	"context"
	"flag"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"k8s.io/klog/v2"

	"github.com/actorinformer/actorinformer/actors"
)

// The levels protoactor's records get, through the logger factory.
func TestSystemLoggerLevels(t *testing.T) {
	var mu sync.Mutex
	var got []slog.Record
	sink := &funcHandler{handle: func(r slog.Record) { mu.Lock(); got = append(got, r); mu.Unlock() }}
	sys := actors.NewActorSystem(actors.SystemLogger(slog.New(sink)))
	log := sys.Logger()
	log.Error("EndpointWriter lost connection", "address", "127.0.0.1:1")
	log.Error("EndpointWriter failed to connect", "retry", 1)
	log.Warn("sendGossipForMember failed")
	log.Error("Failed to register service to k8s, will retry")
	log.Warn("Could not read contents, defaulting to empty namespace")
	log.Info("[DeadLetter]")
	log.Info("[ACTOR] Recovering", "reason", "boom")
	log.Debug("details")
	want := map[string]slog.Level{
		"EndpointWriter lost connection":                         -1,
		"EndpointWriter failed to connect":                       -1,
		"sendGossipForMember failed":                             -1,
		"Failed to register service to k8s, will retry":          slog.LevelError,
		"Could not read contents, defaulting to empty namespace": slog.LevelWarn,
		"[DeadLetter]":         -2,
		"[ACTOR] Recovering":   slog.LevelError,
		"details":              -6,
		"actor system started": -2, // protoactor's own, at Info
	}
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]bool{}
	for _, r := range got {
		w, ok := want[r.Message]
		if !ok {
			continue
		}
		seen[r.Message] = true
		if r.Level != w {
			t.Errorf("%q at %v, want %v", r.Message, r.Level, w)
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		if attrs["lib"] != "protoactor" || attrs["system"] != sys.ID {
			t.Errorf("%q with %v, want lib=protoactor system=%s", r.Message, attrs, sys.ID)
		}
	}
	for m := range want {
		if !seen[m] {
			t.Errorf("%q not logged", m)
		}
	}
}

// funcHandler hands every record, with the logger's attributes, to handle.
type funcHandler struct {
	handle func(slog.Record)
	attrs  []slog.Attr
}

func (h *funcHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *funcHandler) Handle(_ context.Context, r slog.Record) error {
	r.AddAttrs(h.attrs...)
	h.handle(r)
	return nil
}
func (h *funcHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &funcHandler{handle: h.handle, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}
func (h *funcHandler) WithGroup(string) slog.Handler { return h }

// By default protoactor logs to klog: at klog's default verbosity an actor
// system's start and a dead letter say nothing, an actor's panic is an
// error line; with -v=2 the start is there, in klog's format (no colours,
// the date and the time to the microsecond).
func TestNewActorSystemLogsToKlog(t *testing.T) {
	buf := captureKlogV(t, "0")
	sys := actors.NewActorSystem()
	sys.Root.Send(actor.NewPID("nonhost", "nobody"), "lost") // a dead letter
	pid := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(string); ok {
			panic("boom")
		}
	}))
	sys.Root.Send(pid, "panic")
	_ = sys.Root.PoisonFuture(pid).Wait()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(buf.String(), "[ACTOR] Recovering") && time.Now().Before(deadline) {
		klog.Flush()
		time.Sleep(10 * time.Millisecond)
	}
	klog.Flush()
	out := buf.String()
	// klog writes an error line to its info, warning and error outputs,
	// here one buffer.
	lines := slices.Compact(strings.Split(strings.TrimSpace(out), "\n"))
	if len(lines) != 1 || !regexp.MustCompile(`^E\d{4} \d{2}:\d{2}:\d{2}\.\d{6} .*"\[ACTOR\] Recovering" .*lib="protoactor" system="`+sys.ID+`"`).MatchString(lines[0]) {
		t.Errorf("at the default verbosity, want only the panic's error line; got:\n%s", out)
	}

	buf = captureKlogV(t, "2")
	sys = actors.NewActorSystem()
	sys.Root.Send(actor.NewPID("nonhost", "nobody"), "lost")
	klog.Flush()
	out = buf.String()
	for _, want := range []string{`"actor system started"`, `[DeadLetter]`} {
		if !strings.Contains(out, want) {
			t.Errorf("with -v=2, no %s line:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("colour codes in klog's output:\n%q", out)
	}
}

// captureKlogV sends klog's output to a buffer, at verbosity v, until the
// test ends.
func captureKlogV(t *testing.T, v string) *safeBuffer {
	buf := captureKlog(t)
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if err := fs.Set("v", v); err != nil {
		t.Fatal(err)
	}
	return buf
}
