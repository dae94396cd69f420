package etcdcheck

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
)

// recordingHandler keeps the records it is given, with the attributes of
// WithAttrs before theirs.
type recordingHandler struct {
	level slog.Level
	mu    *sync.Mutex
	recs  *[]recorded
	attrs []slog.Attr
}

type recorded struct {
	level slog.Level
	msg   string
	pc    uintptr
	attrs map[string]slog.Value
}

func newRecordingHandler(level slog.Level) *recordingHandler {
	return &recordingHandler{level: level, mu: new(sync.Mutex), recs: new([]recorded)}
}

func (h *recordingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	rec := recorded{level: r.Level, msg: r.Message, pc: r.PC, attrs: map[string]slog.Value{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value
		return true
	})
	h.mu.Lock()
	*h.recs = append(*h.recs, rec)
	h.mu.Unlock()
	return nil
}

func (h *recordingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), attrs...)
	return &c
}

func (h *recordingHandler) WithGroup(string) slog.Handler { return h }

func (h *recordingHandler) records() []recorded {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]recorded(nil), *h.recs...)
}

// A warning with fields, and a field of With, reach the slog handler as a
// record at Warn with the message and those attributes; a debug entry does
// not reach a handler at Info.
func TestEtcdLogger(t *testing.T) {
	h := newRecordingHandler(slog.LevelInfo)
	lg := EtcdLogger(slog.New(h)).With(zap.String("endpoint", "127.0.0.1:2379"))
	lostErr := errors.New("lease lost")

	if lg.Core().Enabled(zap.DebugLevel) {
		t.Error("debug is enabled under a handler at Info")
	}
	lg.Debug("backoff", zap.Uint("attempt", 1))
	if recs := h.records(); len(recs) != 0 {
		t.Fatalf("a debug entry reached a handler at Info: %+v", recs)
	}

	lg.Warn("keep-alive failed", zap.String("key", "/my-controller/m1"), zap.Int("attempt", 3), zap.Error(lostErr))
	recs := h.records()
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1: %+v", len(recs), recs)
	}
	r := recs[0]
	if r.level != slog.LevelWarn || r.msg != "keep-alive failed" {
		t.Errorf("level %v, message %q; want WARN, %q", r.level, r.msg, "keep-alive failed")
	}
	if r.pc == 0 || !strings.HasSuffix(funcFile(r.pc), "logger_test.go") {
		t.Errorf("the record's caller is %q, want this test", funcFile(r.pc))
	}
	want := map[string]any{
		"endpoint": "127.0.0.1:2379",
		"key":      "/my-controller/m1",
		"attempt":  int64(3),
		"logger":   "etcd-client",
	}
	for k, v := range want {
		got, ok := r.attrs[k]
		if !ok || got.Any() != v {
			t.Errorf("attribute %s = %v (present %v), want %v (%T)", k, got, ok, v, v)
		}
	}
	if got := r.attrs["error"].Any(); got != lostErr {
		t.Errorf("attribute error = %#v, want the error itself", got)
	}
	if len(r.attrs) != len(want)+1 {
		t.Errorf("attributes %v, want %d", r.attrs, len(want)+1)
	}

	lg.Error("no endpoint")
	if recs := h.records(); len(recs) != 2 || recs[1].level != slog.LevelError {
		t.Errorf("an error entry gave %+v, want a second record at ERROR", recs)
	}
}

// funcFile is the file of the code at pc.
func funcFile(pc uintptr) string {
	f, _ := runtime.CallersFrames([]uintptr{pc}).Next()
	return f.File
}

// Zap namespaces become slog groups.
func TestEtcdLoggerNamespace(t *testing.T) {
	h := newRecordingHandler(slog.LevelInfo)
	EtcdLogger(slog.New(h)).Info("m", zap.String("a", "1"), zap.Namespace("ns"), zap.String("b", "2"))
	recs := h.records()
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	if got := recs[0].attrs["a"].String(); got != "1" {
		t.Errorf("a = %q, want 1", got)
	}
	ns := recs[0].attrs["ns"]
	if ns.Kind() != slog.KindGroup || len(ns.Group()) != 1 || ns.Group()[0].Key != "b" || ns.Group()[0].Value.String() != "2" {
		t.Errorf("ns = %v, want the group [b=2]", ns)
	}
}

// With no logger, entries go to klog: no panic.
func TestEtcdLoggerNil(t *testing.T) {
	lg := EtcdLogger(nil)
	if lg == nil {
		t.Fatal("EtcdLogger(nil) is nil")
	}
	lg.With(zap.String("k", "v")).Warn("etcd logger test: a warning to klog", zap.Error(errors.New("e")))
	if err := lg.Sync(); err != nil {
		t.Errorf("Sync: %v", err)
	}
}
