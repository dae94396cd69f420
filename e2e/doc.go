// Package e2e runs actorinformer's informer and client-go's
// cache.NewSharedIndexInformer side by side against a real kube-apiserver
// and etcd (started by internal/testcluster on loopback) and checks that
// both end up with the server's state under churn, connection cuts, an
// apiserver restart, etcd compaction (410), WatchList streaming, a
// CustomResourceDefinition coming and going, a Forbidden client, and a
// 10,000-object initial list (whose figures go into docs/performance.md).
//
// The package has tests only. Without the binaries (hack/build-binaries.sh)
// the tests skip, unless ACTORINFORMER_REQUIRE_CLUSTER is set, as in CI.
package e2e
