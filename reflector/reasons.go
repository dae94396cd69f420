package reflector

// How the reflector names what ends a watch or a list, for its metrics and
// logs, and how it classifies errors as client-go's reflector does
// (expired, too large a resource version, retriable).

import (
	"errors"
	"net"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/tools/cache"
)

// Error reasons passed to telemetry.Metrics.WatchError.
const (
	ReasonExpired         = "expired"
	ReasonGone            = "gone"
	ReasonTooLargeRV      = "too_large_resource_version"
	ReasonForbidden       = "forbidden"
	ReasonUnauthorized    = "unauthorized"
	ReasonTooManyRequests = "too_many_requests"
	ReasonInternal        = "internal"
	ReasonNetwork         = "network"
	ReasonVeryShortWatch  = "very_short_watch"
	ReasonWatchErrorEvent = "watch_error_event"
	ReasonOther           = "other"
)

// Reasons a watch (or WatchList stream) is started, the
// actorinformer.reason of the watch restarts metric.
const (
	RestartInitial = "initial" // the reflector's first watch (or its actor's, after a restart)
	RestartClosed  = "closed"  // the previous watch was closed by the server before its timeout
	RestartTimeout = "timeout" // the previous watch was closed at or after the timeout it asked for
	RestartExpired = "expired" // the previous watch failed with 410 (Expired or Gone)
	RestartError   = "error"   // the previous watch failed otherwise: a failed watch call, an error event, a very short watch
)

// restartReason names why a watch that ended with err (non-nil) must be
// started again.
func restartReason(err error) string {
	if isExpiredError(err) {
		return RestartExpired
	}
	return RestartError
}

// errorReason names err for the watch error metric.
func errorReason(err error, fromEvent bool) string {
	var short *cache.VeryShortWatchError
	var noEnd *errNoInitialEventsEnd
	switch {
	case errors.As(err, &noEnd):
		return ReasonNoInitialEventsEnd
	case apierrors.IsResourceExpired(err):
		return ReasonExpired
	case apierrors.IsGone(err):
		return ReasonGone
	case isTooLargeResourceVersionError(err):
		return ReasonTooLargeRV
	case apierrors.IsForbidden(err):
		return ReasonForbidden
	case apierrors.IsUnauthorized(err):
		return ReasonUnauthorized
	case apierrors.IsTooManyRequests(err):
		return ReasonTooManyRequests
	case apierrors.IsInternalError(err):
		return ReasonInternal
	case errors.As(err, &short):
		return ReasonVeryShortWatch
	case isNetworkError(err):
		return ReasonNetwork
	case fromEvent:
		return ReasonWatchErrorEvent
	}
	return ReasonOther
}

func isNetworkError(err error) bool {
	if utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		utilnet.IsHTTP2ConnectionLost(err) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// isExpiredError is client-go's: 410 with reason Expired or Gone.
func isExpiredError(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// isTooLargeResourceVersionError is client-go's, old apiservers included.
func isTooLargeResourceVersionError(err error) bool {
	if apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		return true
	}
	if !apierrors.IsTimeout(err) {
		return false
	}
	var apierr apierrors.APIStatus
	if !errors.As(err, &apierr) || apierr == nil || apierr.Status().Details == nil {
		return false
	}
	for _, cause := range apierr.Status().Details.Causes {
		if cause.Message == "Too large resource version" {
			return true
		}
	}
	return strings.Contains(apierr.Status().Message, "Too large resource version")
}

// isWatchErrorRetriable is client-go's: the apiserver is likely unreachable
// or overloaded, so back off and re-watch from where we were, no relist.
func isWatchErrorRetriable(err error) bool {
	return utilnet.IsConnectionRefused(err) || apierrors.IsTooManyRequests(err)
}

// errorFromEvent turns a watch.Error event's object into an error without
// panicking on a nil or typed-nil object.
func errorFromEvent(obj runtime.Object) error {
	if isNil(obj) {
		return &apierrors.UnexpectedObjectError{}
	}
	return apierrors.FromObject(obj)
}
