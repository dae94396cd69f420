package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// newLogger logs the informer's warnings and errors (watch errors, handler
// panics) to w. A message repeats at most once per second, with the count of
// repeats left out; panic stacks (ours, and klog's "stacktrace") only show
// at debug level.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	if level == "off" {
		return slog.New(slog.DiscardHandler), nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	h := slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: l,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if (a.Key == "stack" || a.Key == "stacktrace") && l > slog.LevelDebug {
				return slog.Attr{}
			}
			return a
		},
	})
	if l <= slog.LevelDebug {
		return slog.New(h), nil
	}
	return slog.New(&throttled{Handler: h, every: time.Second, mu: &sync.Mutex{}, last: map[string]*repeats{}}), nil
}

// throttled passes a record on only if the same message was not passed on
// within every. Its methods may be called by multiple goroutines
// simultaneously.
type throttled struct {
	slog.Handler
	every time.Duration
	mu    *sync.Mutex
	last  map[string]*repeats // shared by the handlers WithAttrs derives
}

type repeats struct {
	at      time.Time
	skipped int
}

func (t *throttled) Handle(ctx context.Context, r slog.Record) error {
	t.mu.Lock()
	rep := t.last[r.Message]
	if rep != nil && r.Time.Sub(rep.at) < t.every {
		rep.skipped++
		t.mu.Unlock()
		return nil
	}
	skipped := 0
	if rep == nil {
		t.last[r.Message] = &repeats{at: r.Time}
	} else {
		skipped, rep.at, rep.skipped = rep.skipped, r.Time, 0
	}
	t.mu.Unlock()
	if skipped > 0 {
		r.AddAttrs(slog.Int("repeats_not_shown", skipped))
	}
	return t.Handler.Handle(ctx, r)
}

func (t *throttled) WithAttrs(as []slog.Attr) slog.Handler {
	return &throttled{Handler: t.Handler.WithAttrs(as), every: t.every, mu: t.mu, last: t.last}
}

func (t *throttled) WithGroup(name string) slog.Handler {
	return &throttled{Handler: t.Handler.WithGroup(name), every: t.every, mu: t.mu, last: t.last}
}
