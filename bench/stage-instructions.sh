#!/usr/bin/env bash
# Instructions per op of each stage's plain core, built normally (no-op
# providers) and with -tags actorinformer_notrace (tracing compiled out),
# counted by valgrind's callgrind: unlike times, these counts repeat exactly
# on a shared machine. Each benchmark runs at two iteration counts; the
# difference of the two totals over the difference of the iterations is the
# count per op, setup excluded (docs/performance.md, "Tracing cost").
#
# Usage: bench/stage-instructions.sh   (needs valgrind: apt-get install valgrind)
# Environment: N (the smaller iteration count; default 20000; the larger is 2N).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
n="${N:-20000}"
out="$(mktemp -d)"
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }

# package, benchmark, and what one op is
stages=(
	"reflector ^BenchmarkMachineWatchEvents$ 100"
	"fifo ^BenchmarkQueueAddPop100$ 100"
	"indexer ^BenchmarkApply/noIndex$ 1"
	"actors ^BenchmarkListenerDeliver$ 1"
)

count() { # count BINARY PKG PATTERN ITERATIONS -> total instructions
	# callgrind cannot run Go's asynchronous preemption signals: one P, no
	# async preemption. It also lacks RDTSCP, which the runtime executes
	# when one of its locks is contended (rarely, with one P): such a run
	# dies with SIGILL and is retried.
	local try log
	for try in 1 2 3 4 5; do
		log="$out/run.log"
		if (cd "$2" && GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind \
			--callgrind-out-file="$out/cg.out" "$1" -test.run '^$' -test.bench "$3" \
			-test.benchtime "${4}x") >"$log" 2>&1 && grep -q '^PASS' "$log"; then
			sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$log"
			return
		fi
		echo "# $2 $3 ${4}x: the run under valgrind failed (try $try), retrying" >&2
	done
	echo "# $2 $3: the run under valgrind kept failing; last log in $log" >&2
	exit 1
}

printf '| stage benchmark | deltas per op | compiled out: instructions/delta | no-op providers: instructions/delta | difference |\n'
printf '|---|---:|---:|---:|---:|\n'
for s in "${stages[@]}"; do
	read -r pkg pattern per <<<"$s"
	declare -A per_delta=()
	for build in notrace traced; do
		tags=()
		[[ $build == notrace ]] && tags=(-tags actorinformer_notrace)
		go test -c "${tags[@]}" -o "$out/$build.test" "./$pkg"
		a=$(count "$out/$build.test" "$pkg" "$pattern" "$n")
		b=$(count "$out/$build.test" "$pkg" "$pattern" "$((2 * n))")
		per_delta[$build]=$(awk -v a="$a" -v b="$b" -v n="$n" -v per="$per" 'BEGIN { printf "%.1f", (b - a) / n / per }')
	done
	awk -v name="$pattern" -v per="$per" -v x="${per_delta[notrace]}" -v y="${per_delta[traced]}" \
		'BEGIN { gsub(/[\^$]/, "", name); printf "| %s | %d | %.1f | %.1f | %+.1f (%+.2f %%) |\n", name, per, x, y, y - x, 100 * (y - x) / x }'
done
echo
echo "N=$n and $((2 * n)) iterations; $(go version | cut -d' ' -f3), $(valgrind --version)"
rm -rf "$out"
