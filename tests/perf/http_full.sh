#!/usr/bin/env bash
# http_full.sh - what writers cost serve-meta when they ask more of a full
# pool than it frees: one serve-meta (SQLite index, durable confirms,
# PAGES 4 KiB pages, 2^20 unless set) filled by a write run of FILL
# seconds (3), then RUNS write runs of build/http_load with new keys, each
# printing the keys asked and the keys written (given a slot, confirmed),
# the server's user and system CPU in microseconds per batch of 128 keys
# asked, and how many lines its log grew by. Freed slots wait out the 6 s
# quarantine (docs/KEYS.md), so most batches are refused (-1): this
# measures what a refusal costs, not how fast a full pool turns over.
#
# Usage: [PAGES=N] [FILL=SECONDS] tests/perf/http_full.sh [BUILD_DIR] [RUNS] [SECONDS] [CLIENTS]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
RUNS=${2:-3}
SECS=${3:-3}
CLIENTS=${4:-4}
PAGES=${PAGES:-$((1 << 20))}
DIR=$(mktemp -d /tmp/pagefs-httpfull.XXXXXX)
PID=''
# shellcheck source=tests/perf/serve_meta.sh
. tests/perf/serve_meta.sh
trap 'serve_meta_stop "$DIR"' EXIT
serve_meta_start http_full.sh "$BUILD" "$DIR" "$PAGES"
hz=$(getconf CLK_TCK)
fill=$(HTTP_LOAD_RUN=100 "$BUILD/http_load" "$PORT" write "$CLIENTS" "${FILL:-3}" "$PID")
echo "fill: $fill"
for ((r = 0; r < RUNS; r++)); do
	read -r u0 s0 < <(serve_meta_ticks)
	l0=$(wc -l <"$DIR/err")
	line=$(HTTP_LOAD_RUN=$r "$BUILD/http_load" "$PORT" write "$CLIENTS" "$SECS" "$PID")
	read -r u1 s1 < <(serve_meta_ticks)
	l1=$(wc -l <"$DIR/err")
	keys=$(sed -n 's/.* keys=\([0-9]*\).*/\1/p' <<<"$line")
	written=$(sed -n 's/.* written=\([0-9]*\).*/\1/p' <<<"$line")
	if [[ -z $keys || $keys == 0 ]]; then
		echo "http_full.sh: no key asked in run $r: $line" >&2
		exit 1
	fi
	awk -v k="$keys" -v w="$written" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$hz" -v l=$((l1 - l0)) \
		'BEGIN { printf "asked=%d  written=%d  user_us/128=%.0f  sys_us/128=%.0f  log_lines=%d\n",
			k, w, u / hz * 1e6 / k * 128, s / hz * 1e6 / k * 128, l }'
done
