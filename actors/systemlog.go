package actors

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/actorinformer/actorinformer/telemetry"
)

// SystemLogger is protoactor's logger factory (an option of
// NewActorSystem or of actor.NewActorSystem) that sends the actor
// system's log lines, and its remote's and cluster's, to l, at the levels
// below. NewActorSystem uses it with klog's logger unless given another
// actor.WithLoggerFactory; so do the actor systems the informers create,
// with the informer's logger (WithLogger) or klog's.
//
// protoactor logs its life at Info: a start prints about 25 lines, a dead
// letter (routine while a peer's connection is being made) one line each.
// Its levels become, in slog's terms, where klog's verbosity v is slog
// level -v:
//
//   - Error stays Error and Warn stays Warn (klog's E and W lines),
//     except what happens whenever a cluster member leaves or dies: a
//     connection to a peer lost, refused or retried, a gossip to it timed
//     out. Those are -1 (klog -v=1).
//   - Info is -2 (klog -v=2), dead letters included; Debug is -6.
//   - An actor that panicked and restarts ("[ACTOR] Recovering", Info in
//     protoactor) is Error.
//
// Each line carries lib=protoactor and the actor system's id (for a
// cluster member, the end of its member id). The format is l's: klog's
// text, with a full timestamp and no colours, by default.
func SystemLogger(l *slog.Logger) actor.ConfigOption {
	h := l.Handler()
	return actor.WithLoggerFactory(func(sys *actor.ActorSystem) *slog.Logger {
		return slog.New(&systemHandler{next: h}).With("lib", "protoactor", "system", sys.ID)
	})
}

// routinePeerLogs are the messages protoactor logs at Error or Warn
// whenever a cluster member leaves or dies: its endpoint writer retrying
// the connection, the gossip to it timing out.
var routinePeerLogs = []string{
	"EndpointWriter lost connection",
	"EndpointWriter failed to connect",
	"EndpointWriter failed to create receive stream",
	"EndpointReader failed to read",
	"sendGossipForMember failed",
	"Gossip could not send gossip request",
}

// systemLevel is the level protoactor's record r is logged at.
func systemLevel(r slog.Record) slog.Level {
	switch {
	case r.Level >= slog.LevelWarn:
		for _, m := range routinePeerLogs {
			if strings.HasPrefix(r.Message, m) {
				return -1
			}
		}
		return r.Level
	case strings.HasPrefix(r.Message, "[ACTOR] Recovering"):
		return slog.LevelError
	default:
		return r.Level - 2
	}
}

// systemHandler maps protoactor's levels (systemLevel) before next. It
// adds the logger's attributes to each record itself: klog's slog handler
// drops those given to its WithAttrs.
type systemHandler struct {
	next  slog.Handler
	attrs []slog.Attr
}

// Enabled is true when a record at level could be logged: Info ones may be
// an actor's panic, at Error.
func (h *systemHandler) Enabled(ctx context.Context, level slog.Level) bool {
	switch {
	case level >= slog.LevelWarn:
		return h.next.Enabled(ctx, level) || h.next.Enabled(ctx, -1)
	case level >= slog.LevelInfo:
		return h.next.Enabled(ctx, level-2) || h.next.Enabled(ctx, slog.LevelError)
	default:
		return h.next.Enabled(ctx, level-2)
	}
}

func (h *systemHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = systemLevel(r)
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	if len(h.attrs) > 0 {
		r = r.Clone()
		r.AddAttrs(h.attrs...)
	}
	return h.next.Handle(ctx, r)
}

func (h *systemHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &systemHandler{next: h.next, attrs: append(slices.Clip(h.attrs), attrs...)}
}

func (h *systemHandler) WithGroup(name string) slog.Handler {
	next := h.next
	if len(h.attrs) > 0 {
		next = next.WithAttrs(h.attrs)
	}
	return &systemHandler{next: next.WithGroup(name)}
}

// klogSystemLogger is SystemLogger to klog.
func klogSystemLogger() actor.ConfigOption { return SystemLogger(telemetry.KlogLogger()) }
