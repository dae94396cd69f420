#!/usr/bin/env bash
# Builds the binaries that the integration tests run (see internal/testcluster):
#
#   kube-apiserver v1.37.2 and etcd v3.7.0  from hack/kubebin   (target "kube")
#   jaeger v1.62.0 (v2, all-in-one)         from hack/jaegerbin (target "jaeger")
#
# Usage: hack/build-binaries.sh [all|kube|jaeger|kube-apiserver|etcd]...
# (no argument = all).
#
# A binary is built only when it is missing from the bin directory, so the
# script is cheap to run again. The bin directory is $ACTORINFORMER_BIN_DIR if
# set (a relative path is taken relative to the repository root), else
# <repo>/.cache/bin (git-ignored). Set FORCE=1 to rebuild binaries that exist.
#
# Everything comes from the Go module proxy: each wrapper module's go.mod and
# go.sum pin the exact versions. A cold kube-apiserver build takes several
# minutes on 2 cores; GOCACHE makes later builds fast.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${ACTORINFORMER_BIN_DIR:-$repo/.cache/bin}"
case "$bin" in
/*) ;;
*) bin="$repo/$bin" ;;
esac
force="${FORCE:-0}"

kube_version=v1.37.2

log() { printf 'build-binaries: %s\n' "$*" >&2; }

# build NAME MODULE_DIR PACKAGE [go build flags...]
build() {
	local name="$1" moddir="$2" pkg="$3"
	shift 3
	local out="$bin/$name"
	if [[ -x "$out" && "$force" != 1 ]]; then
		log "$name: present at $out, skipping"
		return 0
	fi
	log "$name: building $pkg in ${moddir#"$repo"/} -> $out"
	mkdir -p "$bin"
	local start=$SECONDS
	# Build to a temporary name first so an interrupted build never leaves a
	# truncated binary that a later run would take as present.
	(cd "$moddir" && go build -mod=readonly "$@" -o "$out.tmp.$$" "$pkg")
	mv -f "$out.tmp.$$" "$out"
	log "$name: built in $((SECONDS - start))s"
}

build_kube_apiserver() {
	local vpkg=k8s.io/component-base/version
	local minor="${kube_version#v1.}"
	minor="${minor%%.*}"
	build kube-apiserver "$repo/hack/kubebin" k8s.io/kubernetes/cmd/kube-apiserver \
		-ldflags "-X $vpkg.gitVersion=$kube_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"
}
build_etcd() {
	build etcd "$repo/hack/kubebin" go.etcd.io/etcd/server/v3
}
build_jaeger() {
	build jaeger "$repo/hack/jaegerbin" github.com/jaegertracing/jaeger/cmd/jaeger
}

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
	targets=(all)
fi

log "bin dir: $bin"
for t in "${targets[@]}"; do
	case "$t" in
	all) build_kube_apiserver; build_etcd; build_jaeger ;;
	kube) build_kube_apiserver; build_etcd ;;
	kube-apiserver) build_kube_apiserver ;;
	etcd) build_etcd ;;
	jaeger) build_jaeger ;;
	-h | --help | help)
		sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		log "unknown target '$t' (want all, kube, jaeger, kube-apiserver or etcd)"
		exit 2
		;;
	esac
done
log "done"
