package testcluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The etcd v3 API is reached through etcd's gRPC gateway (JSON over HTTP on
// the client URL), so the root module does not need go.etcd.io/etcd/client.
// int64 fields travel as JSON strings.

type etcdHeader struct {
	Revision json.Number `json:"revision"`
}

// EtcdRevision returns etcd's current revision (the resourceVersion of the
// newest write).
func (c *Cluster) EtcdRevision(t testing.TB) int64 {
	t.Helper()
	rev, err := c.etcdRevision()
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	return rev
}

// Compact compacts etcd's history up to its current revision (physically, so
// it is done when Compact returns) and returns that revision. Afterwards a
// watch or a list at an older resourceVersion that reaches etcd (with
// Options.WatchCache false) fails with 410 Expired.
func (c *Cluster) Compact(t testing.TB) int64 {
	t.Helper()
	rev, err := c.etcdRevision()
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	if err := c.compact(rev); err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	return rev
}

func (c *Cluster) etcdRevision() (int64, error) {
	// A range over one key that need not exist: only the header matters.
	body := map[string]any{"key": base64.StdEncoding.EncodeToString([]byte("/testcluster-revision-probe")), "count_only": true}
	var resp struct {
		Header etcdHeader `json:"header"`
	}
	if err := c.etcdPost("/v3/kv/range", body, &resp); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(resp.Header.Revision.String(), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd range: bad header revision %q: %w", resp.Header.Revision, err)
	}
	return rev, nil
}

func (c *Cluster) compact(rev int64) error {
	body := map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}
	err := c.etcdPost("/v3/kv/compaction", body, nil)
	if err != nil && strings.Contains(err.Error(), "has been compacted") {
		return nil // already compacted at or past rev (e.g. by the apiserver)
	}
	return err
}

func (c *Cluster) etcdPost(path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.EtcdURL()+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, strings.TrimSpace(string(rb)))
	}
	if out != nil {
		if err := json.Unmarshal(rb, out); err != nil {
			return fmt.Errorf("etcd %s: decode %q: %w", path, rb, err)
		}
	}
	return nil
}
