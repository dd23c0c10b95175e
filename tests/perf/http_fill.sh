#!/usr/bin/env bash
# http_fill.sh - what a write costs serve-meta as its pool fills: one
# serve-meta (SQLite index, durable confirms, a pool of 2^23 4 KiB pages
# as tests/perf/http_bench.sh initializes it) and RUNS write runs of
# build/http_load one after another, each with new keys, each printing
# the pool's pages after it, keys per server CPU second, the server's
# user and system CPU in microseconds per batch of 128 keys, and how much
# its resident memory grew in the run per key written. The runs
# stop before the pool is full (a full pool answers -1 and stores
# nothing).
#
# Usage: tests/perf/http_fill.sh [BUILD_DIR] [RUNS] [SECONDS] [CLIENTS]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
RUNS=${2:-4}
SECS=${3:-2}
CLIENTS=${4:-4}
PAGES=$((1 << 23))
DIR=$(mktemp -d /tmp/pagefs-httpfill.XXXXXX)
PID=''
# shellcheck source=tests/perf/serve_meta.sh
. tests/perf/serve_meta.sh
trap 'serve_meta_stop "$DIR"' EXIT
serve_meta_start http_fill.sh "$BUILD" "$DIR" "$PAGES"
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$PID/status"; } # KiB
hz=$(getconf CLK_TCK)
total=0
for ((r = 0; r < RUNS; r++)); do
	read -r u0 s0 < <(serve_meta_ticks)
	m0=$(rss)
	line=$(HTTP_LOAD_RUN=$r "$BUILD/http_load" "$PORT" write "$CLIENTS" "$SECS" "$PID")
	read -r u1 s1 < <(serve_meta_ticks)
	m1=$(rss)
	keys=$(sed -n 's/.* keys=\([0-9]*\).*/\1/p' <<<"$line")
	total=$((total + keys))
	awk -v t="$total" -v p="$PAGES" -v k="$keys" -v l="$line" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$hz" \
		-v m=$((m1 - m0)) \
		'BEGIN { split(l, f, "keys/cpu_s="); printf "pool %5.1f %% full (%d pages)  keys/cpu_s=%s  user_us/128=%.0f  sys_us/128=%.0f  rss_bytes/key=%.0f\n",
			100 * t / p, t, f[2], u / hz * 1e6 / k * 128, s / hz * 1e6 / k * 128, m * 1024 / k }'
	if ((total + keys > PAGES)); then break; fi # the next run would fill it
done
