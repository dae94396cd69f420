// Package testcluster runs real control-plane processes for integration
// tests: etcd and kube-apiserver (no controller-manager, no scheduler, so Pods
// stay Pending while ConfigMaps, Secrets and CRDs behave normally), a flaky
// TCP proxy to cut client connections, and a Jaeger all-in-one to receive
// OpenTelemetry spans.
//
// The package only executes binaries; it never imports k8s.io/kubernetes or
// etcd's server. The binaries are built from pinned wrapper modules by
//
//	hack/build-binaries.sh          # kube-apiserver, etcd and jaeger
//	hack/build-binaries.sh kube     # kube-apiserver and etcd only
//	hack/build-binaries.sh jaeger   # jaeger only
//
// into the bin directory: $ACTORINFORMER_BIN_DIR if set (a relative path is
// taken relative to the repository root), else <repo>/.cache/bin. See
// [BinDir].
//
// # Missing binaries: skip or fail
//
// When a binary is missing, [Start], [StartJaeger] and [RequireBinaries] call
// t.Skip, so `go test ./...` passes on a machine that has not built them. When
// the environment variable ACTORINFORMER_REQUIRE_CLUSTER is set to any
// non-empty value (CI sets it), they call t.Fatal with the reason instead, so
// a CI run can never pass by silently skipping its integration tests.
//
// # Processes
//
// Every process runs in its own process group with its data in t.TempDir();
// a t.Cleanup kills the whole group (SIGKILL) whether the test passed or not,
// and on Linux the processes also get SIGKILL if the test binary itself dies
// (for example on a -timeout panic). Process output goes to log files in the
// temp dir; on a start failure the error includes the tail of the log.
//
// Ports are picked free on 127.0.0.1 just before a process starts; nothing
// listens on any other address.
package testcluster
