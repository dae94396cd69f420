//go:build tools

// Package kubebin pins the versions of kube-apiserver and etcd that the
// actorinformer integration tests run against (see internal/testcluster).
// It is its own module so that the library's go.mod never depends on
// k8s.io/kubernetes. k8s.io/kubernetes replaces every k8s.io staging module
// with a local path, so the replace block in go.mod points them back at the
// published v0.37.2 versions.
//
// Build the binaries with ../build-binaries.sh.
package kubebin

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
)
