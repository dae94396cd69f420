package etcdcheck

import (
	"context"
	"log/slog"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/actorinformer/actorinformer/telemetry"
)

// EtcdLogger is a logger for the etcd client of protoactor's etcd
// provider, which writes its entries to l (to klog when l is nil, as the
// informer does), for clientv3.Config's Logger:
//
//	clientv3.Config{Endpoints: …, Logger: etcdcheck.EtcdLogger(nil)}
//
// Without a Logger the etcd client logs JSON to stderr, past klog and the
// informer's logger, through a sampler that holds about 450 KB of heap.
// Zap's levels map to slog's (DPanic and above to Error) and l's handler
// decides which are written; the entries are named "etcd-client" (their
// "logger" attribute), like the client's default logger's, and carry the
// etcd caller's position.
func EtcdLogger(l *slog.Logger) *zap.Logger {
	if l == nil {
		l = telemetry.KlogLogger()
	}
	return zap.New(slogCore{h: l.Handler()}, zap.AddCaller()).Named("etcd-client")
}

// slogCore is a zapcore.Core that hands each entry to a slog.Handler, with
// no sampler. With's fields become the handler's attributes (a namespace
// its group), an entry's fields the record's.
type slogCore struct {
	h slog.Handler
}

// slogLevel maps a zap level to slog's.
func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (c slogCore) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), slogLevel(l))
}

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	h := c.h
	enc := zapcore.NewMapObjectEncoder()
	var attrs []slog.Attr
	for _, f := range fields {
		if f.Type == zapcore.NamespaceType {
			if len(attrs) > 0 {
				h = h.WithAttrs(attrs)
				attrs = nil
			}
			h = h.WithGroup(f.Key)
			continue
		}
		attrs = appendField(attrs, enc, f)
	}
	if len(attrs) > 0 {
		h = h.WithAttrs(attrs)
	}
	return slogCore{h: h}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	var pc uintptr
	if e.Caller.Defined {
		pc = e.Caller.PC
	}
	r := slog.NewRecord(e.Time, slogLevel(e.Level), e.Message, pc)
	attrs := make([]slog.Attr, 0, len(fields)+1)
	if e.LoggerName != "" {
		attrs = append(attrs, slog.String("logger", e.LoggerName))
	}
	r.AddAttrs(append(attrs, fieldAttrs(fields)...)...)
	return c.h.Handle(context.Background(), r)
}

func (slogCore) Sync() error { return nil }

// fieldAttrs turns an entry's fields into attributes; a namespace field
// puts the fields after it into a group.
func fieldAttrs(fields []zapcore.Field) []slog.Attr {
	enc := zapcore.NewMapObjectEncoder()
	var attrs []slog.Attr
	for i, f := range fields {
		if f.Type == zapcore.NamespaceType {
			rest := fieldAttrs(fields[i+1:])
			if len(rest) == 0 {
				return attrs
			}
			return append(attrs, slog.Attr{Key: f.Key, Value: slog.GroupValue(rest...)})
		}
		attrs = appendField(attrs, enc, f)
	}
	return attrs
}

// appendField appends f's attributes to attrs: an error as itself (the
// handler formats it), any other field as the map encoder encodes it (an
// inlined object gives several).
func appendField(attrs []slog.Attr, enc *zapcore.MapObjectEncoder, f zapcore.Field) []slog.Attr {
	if f.Type == zapcore.SkipType {
		return attrs
	}
	if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType {
		return append(attrs, slog.Any(f.Key, err))
	}
	clear(enc.Fields)
	f.AddTo(enc)
	if v, ok := enc.Fields[f.Key]; ok && len(enc.Fields) == 1 {
		return append(attrs, slog.Any(f.Key, v))
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	return attrs
}
