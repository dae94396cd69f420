#!/usr/bin/env bash
# What the tracing and metrics code costs each stage's plain core when the
# providers are the default no-ops: the stage benchmarks (one goroutine, no
# actor scheduling, so far less spread than the whole pipeline) built
# normally and with -tags actorinformer_notrace (tracing compiled out), run
# alternately ROUNDS times, then compared by benchstat (docs/performance.md,
# "Tracing cost").
#
# Usage: bench/stage-cost.sh [ROUNDS]   (default 10)
# Environment: BENCHTIME (default 1s), OUT (a folder for the raw results).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

rounds="${1:-10}"
benchtime="${BENCHTIME:-1s}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"

# package and benchmark pattern of each stage, in pipeline order
stages=(
	"reflector ^BenchmarkMachineWatchEvents$"
	"fifo ^BenchmarkQueueAddPop100$"
	"indexer ^BenchmarkApply/noIndex$"
	"actors ^BenchmarkListenerDeliver$"
)
for build in traced notrace; do
	: >"$out/$build.txt"
	tags=()
	[[ $build == notrace ]] && tags=(-tags actorinformer_notrace)
	for s in "${stages[@]}"; do
		pkg=${s%% *}
		go test -c "${tags[@]}" -o "$out/$build-$pkg.test" "./$pkg"
	done
done

run() { # run BUILD
	for s in "${stages[@]}"; do
		pkg=${s%% *}
		(cd "$pkg" && "$out/$1-$pkg.test" -test.run '^$' -test.bench "${s#* }" \
			-test.benchtime "$benchtime" -test.count 1) | grep '^Benchmark' >>"$out/$1.txt"
	done
}

for ((i = 1; i <= rounds; i++)); do
	echo "# round $i/$rounds" >&2
	if ((i % 2)); then run notrace; run traced; else run traced; run notrace; fi
done

echo "rounds: $rounds, -benchtime $benchtime, raw results in $out"
echo "machine: $(go env GOOS)/$(go env GOARCH), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'), $(go version | cut -d' ' -f3)"
cp "$out/notrace.txt" "$out/compiled-out.txt"
cp "$out/traced.txt" "$out/noop.txt"
(cd "$out" && timeout 300 go run golang.org/x/perf/cmd/benchstat@latest compiled-out.txt noop.txt)
