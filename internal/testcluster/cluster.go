package testcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

const (
	// AdminUser is the user of Config(): a member of system:masters.
	AdminUser = "testcluster-admin"
	// UnprivilegedUser is the user of UnprivilegedConfig(): authenticated,
	// with no RBAC rights beyond the defaults (discovery, self reviews), so
	// listing or watching any resource is forbidden (403).
	UnprivilegedUser = "testcluster-unprivileged"

	// DefaultReadyTimeout bounds how long Start waits for /readyz.
	DefaultReadyTimeout = 60 * time.Second

	logTailLines = 40
)

// Options configures Start.
type Options struct {
	// WatchCache enables the apiserver watch cache. The zero value runs with
	// --watch-cache=false: every watch goes straight to etcd, so a Compact
	// makes a watch from an older resourceVersion fail with 410 Expired.
	WatchCache bool
	// FeatureGates is passed as --feature-gates when not empty,
	// e.g. "WatchList=true".
	FeatureGates string
	// APIServerArgs are appended to the kube-apiserver command line (after
	// the harness's own flags, so a repeated flag overrides where the flag
	// type allows).
	APIServerArgs []string
	// EtcdArgs are appended to the etcd command line.
	EtcdArgs []string
	// ReadyTimeout bounds the wait for etcd and for kube-apiserver to be
	// ready; zero means DefaultReadyTimeout.
	ReadyTimeout time.Duration
}

// Cluster is an etcd and a kube-apiserver started by Start. Its methods that
// take a testing.TB fail the test on error.
type Cluster struct {
	opts Options
	dir  string

	etcdBin, apiBin        string
	etcdPort, etcdPeerPort int // fixed after the first start
	apiPort                int

	adminToken, userToken string
	certPEM               []byte
	apiArgs               []string // without the port, which is fixed after the first start

	etcdTook, apiTook time.Duration // how long each took to be ready

	mu   sync.Mutex
	etcd *process // nil while stopped
	api  *process // nil while stopped
}

// Start starts etcd and kube-apiserver on free loopback ports with their
// data in t.TempDir(), waits until /readyz answers ok and the default
// namespace exists, and registers a t.Cleanup that kills both. It skips the
// test when the binaries are missing (fails it when
// $ACTORINFORMER_REQUIRE_CLUSTER is set).
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	apiBin, err := binPath(KubeAPIServerBinary)
	if err != nil {
		skipOrFatal(t, err)
	}
	etcdBin, err := binPath(EtcdBinary)
	if err != nil {
		skipOrFatal(t, err)
	}
	c := newCluster(t.TempDir(), opts, apiBin, etcdBin)
	// Registered right after TempDir, so it runs before the directory is
	// removed (cleanups run last-in first-out) and even if Start fails below.
	t.Cleanup(c.kill)
	if err := c.start(); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	t.Logf("testcluster: etcd %s ready in %v, kube-apiserver %s ready in %v (dir %s)",
		c.EtcdURL(), c.etcdTook.Round(time.Millisecond), c.Host(), c.apiTook.Round(time.Millisecond), c.dir)
	return c
}

// Launch starts etcd and kube-apiserver as Start does, outside a test:
// their data, keys and logs go to dir, which must exist and which Launch
// and Stop leave in place. A missing binary is an error. The caller must
// call Stop; should it die without, the processes get SIGKILL (Linux).
func Launch(dir string, opts Options) (*Cluster, error) {
	apiBin, err := binPath(KubeAPIServerBinary)
	if err != nil {
		return nil, err
	}
	etcdBin, err := binPath(EtcdBinary)
	if err != nil {
		return nil, err
	}
	c := newCluster(dir, opts, apiBin, etcdBin)
	if err := c.start(); err != nil {
		c.kill()
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	return c, nil
}

func newCluster(dir string, opts Options, apiBin, etcdBin string) *Cluster {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	return &Cluster{
		opts:       opts,
		dir:        dir,
		etcdBin:    etcdBin,
		apiBin:     apiBin,
		adminToken: randomToken(),
		userToken:  randomToken(),
	}
}

// start writes the keys and starts etcd, then kube-apiserver.
func (c *Cluster) start() error {
	if err := c.writeFiles(); err != nil {
		return err
	}
	start := time.Now()
	if err := c.startEtcd(true); err != nil {
		return err
	}
	etcdReady := time.Now()
	if err := c.startAPIServer(true); err != nil {
		return err
	}
	c.etcdTook, c.apiTook = etcdReady.Sub(start), time.Since(etcdReady)
	return nil
}

// ReadyAfter returns how long etcd, then kube-apiserver, took to be ready.
func (c *Cluster) ReadyAfter() (etcd, apiserver time.Duration) { return c.etcdTook, c.apiTook }

// StopTimeout bounds how long Stop waits for each process to exit after
// SIGTERM before it sends SIGKILL.
const StopTimeout = 15 * time.Second

// Stop stops kube-apiserver, then etcd: SIGTERM to each one's process
// group, then SIGKILL if it has not exited within StopTimeout. It returns
// once both have exited, with an error naming any that needed SIGKILL.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	api, etcd := c.api, c.etcd
	c.api, c.etcd = nil, nil
	c.mu.Unlock()
	var errs []error
	for _, p := range []*process{api, etcd} {
		if p == nil {
			continue
		}
		if !p.stop(StopTimeout) {
			errs = append(errs, fmt.Errorf("%s (pid %d) did not exit within %v of SIGTERM: killed", p.name, p.cmd.Process.Pid, StopTimeout))
		}
	}
	return errors.Join(errs...)
}

// PIDs returns the process ids of kube-apiserver (0 while it is stopped)
// and etcd.
func (c *Cluster) PIDs() (apiserver, etcd int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.api != nil {
		apiserver = c.api.cmd.Process.Pid
	}
	if c.etcd != nil {
		etcd = c.etcd.cmd.Process.Pid
	}
	return apiserver, etcd
}

func (c *Cluster) writeFiles() error {
	pub, key, err := writeServiceAccountKeys(c.dir)
	if err != nil {
		return fmt.Errorf("service-account keys: %w", err)
	}
	crt, crtKey, certPEM, err := writeServingCert(c.dir)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	c.certPEM = certPEM
	tokens := filepath.Join(c.dir, "tokens.csv")
	// token,user,uid,"group1,group2"
	content := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n%s,%s,%s\n",
		c.adminToken, AdminUser, AdminUser+"-uid",
		c.userToken, UnprivilegedUser, UnprivilegedUser+"-uid")
	if err := os.WriteFile(tokens, []byte(content), 0o600); err != nil {
		return err
	}
	certDir := filepath.Join(c.dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	c.apiArgs = []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--cert-dir=" + certDir,
		"--tls-cert-file=" + crt,
		"--tls-private-key-file=" + crtKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + pub,
		"--service-account-signing-key-file=" + key,
		"--token-auth-file=" + tokens,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		// No controller-manager runs, so nothing would create the
		// "default" ServiceAccount that this admission plugin requires for
		// every Pod.
		"--disable-admission-plugins=ServiceAccount",
		// Nothing can reach 127.0.0.1 from a Pod anyway; this avoids
		// periodic writes of the kubernetes Endpoints.
		"--endpoint-reconciler-type=none",
		"--watch-cache=" + strconv.FormatBool(c.opts.WatchCache),
	}
	if c.opts.FeatureGates != "" {
		c.apiArgs = append(c.apiArgs, "--feature-gates="+c.opts.FeatureGates)
	}
	return nil
}

// startEtcd starts etcd and waits until it is healthy. The first start
// picks free ports (and retries with others if they were taken meanwhile);
// later starts reuse them and the data directory.
func (c *Cluster) startEtcd(first bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.etcd != nil && !c.etcd.exited() {
		return errors.New("etcd is already running")
	}
	deadline := time.Now().Add(c.opts.ReadyTimeout)
	var lastErr error
	for attempt := 0; attempt < 6; attempt++ {
		if first {
			if attempt >= 3 {
				break
			}
			ports, err := freePorts(2)
			if err != nil {
				return err
			}
			c.etcdPort, c.etcdPeerPort = ports[0], ports[1]
		}
		client, peer := "http://"+hostPort(c.etcdPort), "http://"+hostPort(c.etcdPeerPort)
		args := append([]string{
			"--name=default",
			"--data-dir=" + filepath.Join(c.dir, "etcd"),
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=default=" + peer,
			"--unsafe-no-fsync",
		}, c.opts.EtcdArgs...)
		p, err := startProcess("etcd", c.etcdBin, args, c.dir, filepath.Join(c.dir, "etcd.log"))
		if err != nil {
			return err
		}
		c.etcd = p
		lastErr = c.waitReady(p, func(ctx context.Context) error {
			body, err := httpGet(ctx, nil, client+"/health", "")
			if err != nil {
				return err
			}
			if !strings.Contains(body, `"health":"true"`) {
				return fmt.Errorf("etcd /health: %s", body)
			}
			return nil
		})
		if lastErr == nil {
			return nil
		}
		p.kill()
		// A port taken meanwhile: pick others on a first start; on a
		// restart the old socket may linger a moment, so try again.
		if !portInUse(p.logTail(logTailLines)) || time.Now().After(deadline) {
			break
		}
		if !first {
			time.Sleep(500 * time.Millisecond)
		}
	}
	c.etcd = nil
	return lastErr
}

// startAPIServer starts kube-apiserver and waits until it is ready. The
// first start picks a free port (and retries with another one if it was
// taken meanwhile); later starts reuse it.
func (c *Cluster) startAPIServer(first bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.api != nil && !c.api.exited() {
		return errors.New("kube-apiserver is already running")
	}
	deadline := time.Now().Add(c.opts.ReadyTimeout)
	var lastErr error
	for attempt := 0; ; attempt++ {
		if first {
			port, err := freePort()
			if err != nil {
				return err
			}
			c.apiPort = port
		}
		args := append([]string{
			"--etcd-servers=" + c.EtcdURL(),
			"--secure-port=" + strconv.Itoa(c.apiPort),
		}, c.apiArgs...)
		args = append(args, c.opts.APIServerArgs...)
		p, err := startProcess("kube-apiserver", c.apiBin, args, c.dir, filepath.Join(c.dir, "kube-apiserver.log"))
		if err != nil {
			return err
		}
		c.api = p
		lastErr = c.waitReady(p, c.checkAPIServerReady)
		if lastErr == nil {
			return nil
		}
		p.kill()
		// A port taken meanwhile: pick another one on a first start; on a
		// restart the old socket may linger a moment, so try again.
		if !portInUse(p.logTail(logTailLines)) || attempt >= 5 || time.Now().After(deadline) {
			break
		}
		if !first {
			time.Sleep(500 * time.Millisecond)
		}
	}
	c.api = nil
	return lastErr
}

func (c *Cluster) checkAPIServerReady(ctx context.Context) error {
	hc := c.insecureClient()
	defer hc.CloseIdleConnections()
	body, err := httpGet(ctx, hc, c.Host()+"/readyz", c.adminToken)
	if err != nil {
		return err
	}
	if strings.TrimSpace(body) != "ok" {
		return fmt.Errorf("/readyz: %s", body)
	}
	// The system namespaces are created by a post-start controller that
	// /readyz does not wait for.
	if _, err := httpGet(ctx, hc, c.Host()+"/api/v1/namespaces/default", c.adminToken); err != nil {
		return err
	}
	return nil
}

// waitReady polls check until it succeeds, the process exits or the ready
// timeout passes. The error carries the tail of the process log.
func (c *Cluster) waitReady(p *process, check func(context.Context) error) error {
	return waitProcessReady(p, c.opts.ReadyTimeout, check)
}

func waitProcessReady(p *process, timeout time.Duration, check func(context.Context) error) error {
	start := time.Now()
	deadline := start.Add(timeout)
	var lastErr error
	for {
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready (%v); last lines of %s:\n%s",
				p.name, p.waitErr, p.logPath, p.logTail(logTailLines))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		lastErr = check(ctx)
		cancel()
		if lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v (last check: %v); last lines of %s:\n%s",
				p.name, timeout, lastErr, p.logPath, p.logTail(logTailLines))
		}
		select {
		case <-p.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// kill stops every process of the cluster. It is the t.Cleanup of Start.
func (c *Cluster) kill() {
	c.mu.Lock()
	api, etcd := c.api, c.etcd
	c.mu.Unlock()
	if api != nil {
		api.kill()
	}
	if etcd != nil {
		etcd.kill()
	}
}

// Host returns the apiserver URL, https://127.0.0.1:PORT.
func (c *Cluster) Host() string { return "https://" + c.APIServerAddr() }

// APIServerAddr returns the apiserver's host:port (stable across restarts);
// use it as the target of NewFlakyProxy.
func (c *Cluster) APIServerAddr() string { return hostPort(c.apiPort) }

// EtcdURL returns the etcd client URL, http://127.0.0.1:PORT.
func (c *Cluster) EtcdURL() string { return "http://" + hostPort(c.etcdPort) }

// Dir returns the cluster's temp directory (logs, etcd data, keys).
func (c *Cluster) Dir() string { return c.dir }

// APIServerLog returns the last n lines of the kube-apiserver log (every
// start appends to the same file).
func (c *Cluster) APIServerLog(n int) string {
	return fileTail(filepath.Join(c.dir, "kube-apiserver.log"), n)
}

// EtcdLog returns the last n lines of the etcd log.
func (c *Cluster) EtcdLog(n int) string { return fileTail(filepath.Join(c.dir, "etcd.log"), n) }

// AdminToken returns the bearer token of AdminUser (system:masters).
func (c *Cluster) AdminToken() string { return c.adminToken }

// UnprivilegedToken returns the bearer token of UnprivilegedUser.
func (c *Cluster) UnprivilegedToken() string { return c.userToken }

// CAData returns the PEM certificate the apiserver serves (self-signed), for
// clients that want to verify TLS instead of the Insecure default.
func (c *Cluster) CAData() []byte { return append([]byte(nil), c.certPEM...) }

// Config returns a rest.Config for AdminUser (system:masters) with insecure
// TLS and QPS 1000 / Burst 2000. Each call returns a new copy.
func (c *Cluster) Config() *rest.Config { return c.ConfigFor(c.APIServerAddr()) }

// UnprivilegedConfig returns a rest.Config for UnprivilegedUser: requests
// are authenticated but listing or watching resources gets 403 Forbidden.
func (c *Cluster) UnprivilegedConfig() *rest.Config {
	cfg := c.Config()
	cfg.BearerToken = c.userToken
	return cfg
}

// ConfigFor returns the admin rest.Config pointed at addr (host:port), for
// example a proxy in front of the apiserver.
func (c *Cluster) ConfigFor(addr string) *rest.Config {
	return &rest.Config{
		Host:            "https://" + addr,
		BearerToken:     c.adminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             1000,
		Burst:           2000,
	}
}

// ProxyConfig returns the admin rest.Config that connects through p.
func (c *Cluster) ProxyConfig(p *Proxy) *rest.Config { return c.ConfigFor(p.Addr()) }

// NewProxy starts a flaky proxy in front of this cluster's apiserver; see
// NewFlakyProxy. Use ProxyConfig for a client that goes through it.
func (c *Cluster) NewProxy(t testing.TB) *Proxy {
	t.Helper()
	return NewFlakyProxy(t, c.APIServerAddr())
}

// APIServerRunning reports whether kube-apiserver is running.
func (c *Cluster) APIServerRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.api != nil && !c.api.exited()
}

// StopAPIServer kills kube-apiserver (SIGKILL, like a crash) and waits for
// it to exit. etcd keeps running. A no-op if it is stopped.
func (c *Cluster) StopAPIServer(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	api := c.api
	c.api = nil
	c.mu.Unlock()
	if api == nil {
		return
	}
	api.kill()
	if !api.exited() {
		t.Fatalf("testcluster: kube-apiserver (pid %d) did not exit after SIGKILL", api.cmd.Process.Pid)
	}
}

// StartAPIServer starts kube-apiserver again, on the same port and etcd, and
// waits until it is ready.
func (c *Cluster) StartAPIServer(t testing.TB) {
	t.Helper()
	start := time.Now()
	if err := c.startAPIServer(false); err != nil {
		t.Fatalf("testcluster: restart: %v", err)
	}
	t.Logf("testcluster: kube-apiserver %s ready in %v", c.Host(), time.Since(start).Round(time.Millisecond))
}

// RestartAPIServer is StopAPIServer then StartAPIServer. The data in etcd is
// kept; open connections and watches break.
func (c *Cluster) RestartAPIServer(t testing.TB) {
	t.Helper()
	c.StopAPIServer(t)
	c.StartAPIServer(t)
}

// EtcdRunning reports whether etcd is running.
func (c *Cluster) EtcdRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.etcd != nil && !c.etcd.exited()
}

// StopEtcd kills etcd (SIGKILL, like a crash) and waits for it to exit.
// kube-apiserver keeps running and fails its requests until etcd is back.
// A no-op if etcd is stopped.
func (c *Cluster) StopEtcd(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	etcd := c.etcd
	c.etcd = nil
	c.mu.Unlock()
	if etcd == nil {
		return
	}
	etcd.kill()
	if !etcd.exited() {
		t.Fatalf("testcluster: etcd (pid %d) did not exit after SIGKILL", etcd.cmd.Process.Pid)
	}
}

// StartEtcd starts etcd again, on the same ports and data directory, and
// waits until it is healthy. Its data survive (it writes without fsync,
// which a process kill does not undo), leases included, with their time
// to live renewed as at any etcd start.
func (c *Cluster) StartEtcd(t testing.TB) {
	t.Helper()
	start := time.Now()
	if err := c.startEtcd(false); err != nil {
		t.Fatalf("testcluster: etcd restart: %v", err)
	}
	t.Logf("testcluster: etcd %s ready in %v", c.EtcdURL(), time.Since(start).Round(time.Millisecond))
}

// RestartEtcd is StopEtcd then StartEtcd: kube-apiserver and every etcd
// client lose their connections and reconnect.
func (c *Cluster) RestartEtcd(t testing.TB) {
	t.Helper()
	c.StopEtcd(t)
	c.StartEtcd(t)
}

func (c *Cluster) insecureClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed test server
		DisableKeepAlives: true,
	}}
}

// httpGet GETs url and returns the body; a status other than 200 is an
// error. hc nil means a client without keep-alives.
func httpGet(ctx context.Context, hc *http.Client, url, token string) (string, error) {
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		defer hc.CloseIdleConnections()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	// Jaeger's /api/traces answers with up to 1000 whole traces: megabytes.
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}
