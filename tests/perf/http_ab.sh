#!/usr/bin/env bash
# http_ab.sh - two builds of pagefs serve-meta side by side on one
# operation of the metadata protocol: ROUNDS alternated pairs of fresh
# servers (tests/perf/serve_meta.sh: an SQLite index, durable confirms, a
# pool of 2^23 pages), each first written to by 1 client for FILL seconds
# (default 1; 8 fill about half the pool), then measured by http_load. Prints each pair's keys per server CPU
# second and B/A, then the median ratio.
#
# A fresh server per measurement, because on this kind of virtual machine
# a run's speed depends much on whether its memory is new to the process
# (build/fresh_memory); alternation spreads that over both builds.
#
# THREADS_A and THREADS_B give each build's worker threads (default:
# serve-meta's own), so that one build can be compared with itself at two
# thread counts.
#
# ENV_A and ENV_B give each side's environment, as VAR=VALUE words (e.g.
# ENV_B=PAGEFS_HUGE_HEAP=0: one build with and without huge pages).
#
# Each round's line also gives both servers' keys/s.
#
# Usage: [FILL=SECONDS] [THREADS_A=N] [THREADS_B=N] [ENV_A=..] [ENV_B=..] tests/perf/http_ab.sh BUILD_A BUILD_B [exists|get|write] [CLIENTS] [SECONDS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
if (($# < 2)); then
	echo "usage: tests/perf/http_ab.sh BUILD_A BUILD_B [exists|get|write] [CLIENTS] [SECONDS] [ROUNDS]" >&2
	exit 2
fi
A=$1 B=$2 OP=${3:-exists} CLIENTS=${4:-1} SECS=${5:-2} ROUNDS=${6:-5}
DIR=$(mktemp -d /tmp/pagefs-httpab.XXXXXX)
PID=''
trap 'serve_meta_stop "$DIR"' EXIT
# shellcheck source=tests/perf/serve_meta.sh
. tests/perf/serve_meta.sh

measure() { # BUILD THREADS ENV -> "KEYS_PER_CPU_S KEYS_PER_S"
	local build=$1 threads=$2 line SERVE_ENV=$3 # (serve_meta_start reads it)
	serve_meta_start http_ab.sh "$build" "$DIR/run" $((1 << 23)) "$threads"
	HTTP_LOAD_RUN=0 "$build/http_load" "$PORT" write 1 "${FILL:-1}" "$PID" >/dev/null
	line=$(HTTP_LOAD_RUN=1 "$build/http_load" "$PORT" "$OP" "$CLIENTS" "$SECS" "$PID")
	kill "$PID"
	wait "$PID" 2>/dev/null || true
	PID=''
	rm -rf "$DIR/run"
	sed -n 's/.* keys\/s=\([0-9.]*\).*keys\/cpu_s=\([0-9.]*\).*/\2 \1/p' <<<"$line"
}

ratios=()
for ((r = 1; r <= ROUNDS; r++)); do
	read -r a ar < <(measure "$A" "${THREADS_A:-}" "${ENV_A:-}")
	read -r b br < <(measure "$B" "${THREADS_B:-}" "${ENV_B:-}")
	ratios+=("$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')")
	echo "$OP clients=$CLIENTS round=$r a keys/cpu_s=$a keys/s=$ar b keys/cpu_s=$b keys/s=$br b/a=${ratios[-1]}"
done
printf '%s\n' "${ratios[@]}" | sort -g |
	awk -v op="$OP" -v c="$CLIENTS" '{ v[NR] = $1 } END {
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%s clients=%s median b/a=%.3f (min %.3f, max %.3f)\n", op, c, m, v[1], v[NR] }'
