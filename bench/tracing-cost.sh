#!/usr/bin/env bash
# Measures what tracing costs the pipeline (docs/performance.md, "Tracing
# cost"): BenchmarkTracingCost built normally (no-op provider, SDK at 1 % and
# at 100 % sampling, 1 % chosen by actors.SampleRatio before the SDK) and
# built with -tags actorinformer_notrace (tracing compiled out), run
# alternately, ROUNDS times each, one process per round.
# Prints the medians and the ratios to the compiled-out build, then
# benchstat's comparison of the two no-op builds when benchstat can be
# fetched from the Go module proxy.
#
# Usage: bench/tracing-cost.sh [ROUNDS]   (default 6)
# Environment: ACTORINFORMER_BENCH_FULL (default 1: 200k updates over 10k
# keys; empty: the small smoke size), BENCHTIME (default 3x), OUT (a folder
# to keep the raw results in; default a temp folder), BENCH (the -test.bench
# pattern; default '^BenchmarkTracingCost$', all variants; e.g.
# '^BenchmarkTracingCost/noop$' for the no-op comparison alone).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

rounds="${1:-6}"
benchtime="${BENCHTIME:-3x}"
bench="${BENCH:-^BenchmarkTracingCost\$}"
export ACTORINFORMER_BENCH_FULL="${ACTORINFORMER_BENCH_FULL-1}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
: >"$out/notrace.txt"
: >"$out/traced.txt"

go test -c -o "$out/traced.test" ./bench
go test -c -tags actorinformer_notrace -o "$out/notrace.test" ./bench

run() { # run BINARY RESULTFILE
	(cd bench && "$1" -test.run '^$' -test.bench "$bench" \
		-test.benchtime "$benchtime" -test.count 1) | grep '^Benchmark' | tee -a "$2"
}

for ((i = 1; i <= rounds; i++)); do
	echo "# round $i/$rounds" >&2
	# Alternate which build goes first, so that drift on a shared machine
	# hits both alike.
	if ((i % 2)); then
		run "$out/notrace.test" "$out/notrace.txt"
		run "$out/traced.test" "$out/traced.txt"
	else
		run "$out/traced.test" "$out/traced.txt"
		run "$out/notrace.test" "$out/notrace.txt"
	fi
done

echo
echo "rounds: $rounds, -benchtime $benchtime, ACTORINFORMER_BENCH_FULL=${ACTORINFORMER_BENCH_FULL:-}, raw results in $out"
echo "machine: $(go env GOOS)/$(go env GOARCH), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'), $(go version | cut -d' ' -f3)"
echo
# Medians per variant of events/s and cpu-ns/event; ratios to compiled out.
strip='s/^BenchmarkTracingCost\/([^[:space:]]+)/\1/; s/^([^[:space:]]+)-[0-9]+([[:space:]])/\1\2/'
{
	sed -E "$strip" "$out/notrace.txt" | sed -E 's/^noop([[:space:]])/compiled-out\1/'
	sed -E "$strip" "$out/traced.txt"
} | awk '
function median(arr, n,   i, j, t) {
	for (i = 2; i <= n; i++) { t = arr[i]; for (j = i - 1; j >= 1 && arr[j] > t; j--) arr[j + 1] = arr[j]; arr[j + 1] = t }
	return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
{
	name = $1
	if (!(name in count)) order[++names] = name
	k = ++count[name]
	for (f = 3; f < NF; f++) {
		if ($(f + 1) == "events/s") eps[name, k] = $f
		if ($(f + 1) == "cpu-ns/event") cpu[name, k] = $f
	}
}
END {
	for (i = 1; i <= names; i++) {
		n = order[i]
		delete a; delete b
		for (k = 1; k <= count[n]; k++) { a[k] = eps[n, k]; b[k] = cpu[n, k] }
		me[n] = median(a, count[n]); mc[n] = median(b, count[n])
	}
	base = "compiled-out"
	printf "| variant | runs | events/s (median) | throughput vs compiled out | CPU ns/event (median) | CPU vs compiled out |\n"
	printf "|---|---:|---:|---:|---:|---:|\n"
	for (i = 1; i <= names; i++) {
		n = order[i]
		printf "| %s | %d | %.0f | %.3f | %.0f | %.3f |\n", n, count[n], me[n], me[n] / me[base], mc[n], mc[n] / mc[base]
	}
}'

# benchstat's A/B test of the no-op build against the compiled-out one.
echo
grep '^BenchmarkTracingCost/noop' "$out/notrace.txt" >"$out/A-compiled-out.txt" || true
grep '^BenchmarkTracingCost/noop' "$out/traced.txt" >"$out/B-noop.txt" || true
if benchstat_out=$(cd "$out" && timeout 300 go run golang.org/x/perf/cmd/benchstat@latest A-compiled-out.txt B-noop.txt 2>&1); then
	echo "$benchstat_out"
else
	echo "(benchstat unavailable: ${benchstat_out%%$'\n'*})"
fi
