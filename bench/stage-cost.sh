#!/usr/bin/env bash
# What the tracing and metrics code costs each stage's plain core when the
# providers are the default no-ops: the stage benchmarks (one goroutine, no
# actor scheduling, so far less spread than the whole pipeline), built
# normally and with -tags actorinformer_notrace (tracing compiled out)
# (docs/performance.md, "Tracing cost").
#
# Usage:
#   bench/stage-cost.sh [ROUNDS]       times: both builds run alternately
#                                      ROUNDS times (default 10), compared by
#                                      benchstat
#   bench/stage-cost.sh instructions   instructions per delta, counted by
#                                      valgrind's callgrind (apt-get install
#                                      valgrind): each benchmark runs at N and
#                                      2N iterations, and the difference of the
#                                      two totals is per op, setup excluded.
#                                      Unlike times, the counts do not depend
#                                      on the machine's load; the garbage
#                                      collector's share still moves them by a
#                                      few instructions per op between runs.
# Environment: BENCHTIME (times; default 1s), N (instructions; default
# 20000), OUT (a folder for the raw results; default a temp folder).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"

# package, benchmark pattern, and deltas per op, in pipeline order
stages=(
	"reflector ^BenchmarkMachineWatchEvents$ 100"
	"fifo ^BenchmarkQueueAddPop100$ 100"
	"indexer ^BenchmarkApply/noIndex$ 1"
	"listener ^BenchmarkListenerDeliver$ 1"
)

# build BUILD PKG: the test binary of PKG for BUILD (traced or notrace).
build() {
	local tags=()
	[[ $1 == notrace ]] && tags=(-tags actorinformer_notrace)
	go test -c "${tags[@]}" -o "$out/$1-$2.test" "./$2"
}

machine() {
	echo "machine: $(go env GOOS)/$(go env GOARCH), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'), $(go version | cut -d' ' -f3)"
}

times() {
	local rounds="$1" benchtime="${BENCHTIME:-1s}" b s pkg pattern per i
	for b in traced notrace; do
		: >"$out/$b.txt"
		for s in "${stages[@]}"; do build "$b" "${s%% *}"; done
	done
	run() { # run BUILD
		for s in "${stages[@]}"; do
			read -r pkg pattern per <<<"$s"
			(cd "$pkg" && "$out/$1-$pkg.test" -test.run '^$' -test.bench "$pattern" \
				-test.benchtime "$benchtime" -test.count 1) | grep '^Benchmark' >>"$out/$1.txt"
		done
	}
	for ((i = 1; i <= rounds; i++)); do
		echo "# round $i/$rounds" >&2
		if ((i % 2)); then run notrace; run traced; else run traced; run notrace; fi
	done
	echo "rounds: $rounds, -benchtime $benchtime, raw results in $out"
	machine
	cp "$out/notrace.txt" "$out/compiled-out.txt"
	cp "$out/traced.txt" "$out/noop.txt"
	(cd "$out" && timeout 300 go run golang.org/x/perf/cmd/benchstat@latest compiled-out.txt noop.txt)
}

# count BINARY PKG PATTERN ITERATIONS: total instructions of one run.
count() {
	# callgrind cannot run Go's asynchronous preemption signals: one P, no
	# async preemption. It also lacks RDTSCP, which the runtime executes
	# when one of its locks is contended (rarely, with one P): such a run
	# dies with SIGILL and is retried.
	local try log="$out/run.log"
	for try in 1 2 3 4 5; do
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

instructions() {
	local n="${N:-20000}" s pkg pattern per b a c
	command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
	printf '| stage benchmark | deltas per op | compiled out: instructions/delta | no-op providers: instructions/delta | difference |\n'
	printf '|---|---:|---:|---:|---:|\n'
	for s in "${stages[@]}"; do
		read -r pkg pattern per <<<"$s"
		declare -A per_delta=()
		for b in notrace traced; do
			build "$b" "$pkg"
			a=$(count "$out/$b-$pkg.test" "$pkg" "$pattern" "$n")
			c=$(count "$out/$b-$pkg.test" "$pkg" "$pattern" "$((2 * n))")
			per_delta[$b]=$(awk -v a="$a" -v c="$c" -v n="$n" -v per="$per" 'BEGIN { printf "%.1f", (c - a) / n / per }')
		done
		awk -v name="$pattern" -v per="$per" -v x="${per_delta[notrace]}" -v y="${per_delta[traced]}" \
			'BEGIN { gsub(/[\^$]/, "", name); printf "| %s | %d | %.1f | %.1f | %+.1f (%+.2f %%) |\n", name, per, x, y, y - x, 100 * (y - x) / x }'
	done
	echo
	echo "N=$n and $((2 * n)) iterations; $(machine); $(valgrind --version)"
}

case "${1:-10}" in
instructions) instructions ;;
*) times "${1:-10}" ;;
esac
