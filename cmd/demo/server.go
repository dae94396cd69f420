package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// maxRequestBody bounds the bodies the API reads.
const maxRequestBody = 4 << 10

// streamInterval is the time between two snapshots of /api/stream.
const streamInterval = time.Second

// webServer is the demo's web server: the page (web.go), its data API
// and /metrics.
type webServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{} // closed by stop: streams end
	wg   sync.WaitGroup
	stop sync.Once
	err  error // Serve's, once wg is done
	// cleanup runs once the server has stopped.
	cleanup []func()
}

// listen opens the server's socket on addr; serve starts serving.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w (--http 127.0.0.1:0 for a free port, --http '' for no web page)", addr, err)
	}
	return ln, nil
}

// newWebServer prepares a server on ln; start starts it, close stops it.
func newWebServer(ln net.Listener) *webServer {
	return &webServer{ln: ln, done: make(chan struct{})}
}

// start serves h until close.
func (s *webServer) start(h http.Handler) {
	s.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	s.wg.Go(func() {
		if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	})
}

// loopback reports whether the server listens on a loopback address only.
func (s *webServer) loopback() bool {
	a, ok := s.ln.Addr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}

// url is the page's address.
func (s *webServer) url() string { return "http://" + s.ln.Addr().String() + "/" }

// close ends the streams, then stops the server, waiting a little for the
// requests in progress. Idempotent.
func (s *webServer) close() error {
	if s == nil {
		return nil
	}
	s.stop.Do(func() {
		close(s.done)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			_ = s.srv.Close()
		}
		s.wg.Wait()
		for _, f := range s.cleanup {
			f()
		}
	})
	return s.err
}

// api serves the page's data.
type api struct {
	snap    *snapshotter
	fleet   *fleet    // nil: one informer
	faults  *injector // nil: no faults (one informer on a real cluster)
	ring    *spanRing // nil: tracing off
	keys    *keyWatch // nil: tracing off
	done    <-chan struct{}
	now     func() time.Time
	metrics http.Handler // nil: no /metrics
	// viewers measures the handlers' event ages only while someone looks.
	viewers *viewers
}

// lookingFor is how long after a snapshot the event ages go on being
// measured.
const lookingFor = 10 * time.Second

// viewers tracks whether anyone looks at the page's data: a stream is
// open, or a snapshot was asked for in the last lookingFor. Only then are
// the handlers' event ages measured (they cost a stamp per measured
// object), so that the page costs the pipeline nothing when nobody looks.
type viewers struct {
	stamps *stampMap

	mu      sync.Mutex
	streams int
	timer   *time.Timer
	closed  bool
}

func newViewers(stamps *stampMap) *viewers {
	stamps.pause(true)
	return &viewers{stamps: stamps}
}

// seen notes a snapshot.
func (v *viewers) seen() {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return
	}
	v.stamps.pause(false)
	if v.timer == nil {
		v.timer = time.AfterFunc(lookingFor, v.expire)
	} else {
		v.timer.Reset(lookingFor)
	}
}

func (v *viewers) expire() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.streams == 0 {
		v.stamps.pause(true)
	}
}

// stream notes a stream opening (+1) or closing (-1).
func (v *viewers) stream(delta int) {
	if v == nil {
		return
	}
	v.mu.Lock()
	v.streams += delta
	v.mu.Unlock()
	v.seen()
}

// close stops the timer.
func (v *viewers) close() {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	if v.timer != nil {
		v.timer.Stop()
	}
}

// routes is the server's handler.
func (a *api) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", webHandler())
	mux.HandleFunc("GET /api/snapshot", a.getSnapshot)
	mux.HandleFunc("GET /api/stream", a.stream)
	mux.HandleFunc("GET /api/traces", a.getTraces)
	mux.HandleFunc("GET /api/trace", a.getTrace)
	mux.HandleFunc("GET /api/key", a.getKey)
	mux.HandleFunc("DELETE /api/key", a.deleteKey)
	mux.HandleFunc("POST /api/faults", a.postFault)
	for path, allow := range map[string]string{
		"/api/snapshot": "GET, HEAD", "/api/stream": "GET, HEAD", "/api/traces": "GET, HEAD",
		"/api/trace": "GET, HEAD", "/api/key": "GET, HEAD, DELETE", "/api/faults": "POST",
	} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use %s", r.Method, path, allow))
		})
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such API endpoint: "+r.Method+" "+r.URL.Path)
	})
	if a.metrics != nil {
		mux.Handle("GET /metrics", a.metrics)
	}
	return mux
}

func (a *api) getSnapshot(w http.ResponseWriter, _ *http.Request) {
	a.viewers.seen()
	writeJSON(w, http.StatusOK, a.snap.snapshot(a.now()))
}

// stream sends a snapshot at once, then one a second, as server-sent
// events, until the client goes or the demo stops.
func (a *api) stream(w http.ResponseWriter, r *http.Request) {
	a.viewers.stream(+1)
	defer a.viewers.stream(-1)
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The stream outlives the server's read timeout, which would otherwise
	// end it (the server's read of the idle connection times out).
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	t := time.NewTicker(streamInterval)
	defer t.Stop()
	for {
		b, err := json.Marshal(a.snap.snapshot(a.now()))
		if err != nil {
			return
		}
		if _, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-a.done:
			return
		case <-t.C:
		}
	}
}

func (a *api) postFault(w http.ResponseWriter, r *http.Request) {
	if a.faults == nil {
		writeError(w, http.StatusNotFound, "faults can be injected only into the simulated cluster (this demo watches a real one), or into the members of a sharded group (--members)")
		return
	}
	var req faultRequest
	if !readJSON(w, r, &req) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	msg, err := a.faults.apply(ctx, req)
	switch {
	case errors.Is(err, errBadFault):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, errConflict):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "message": msg})
	}
}

// readJSON decodes the request's body, a single JSON object of at most
// maxRequestBody bytes with no unknown field, into v; it answers 4xx and
// returns false if it cannot.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBody)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("more than one JSON value")
		}
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", maxRequestBody))
		} else {
			writeError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
		}
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"cannot encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
