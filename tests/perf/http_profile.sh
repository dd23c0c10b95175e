#!/usr/bin/env bash
# http_profile.sh - where pagefs serve-meta's CPU goes for one operation of
# the metadata protocol: the server as tests/perf/http_bench.sh starts it
# (SQLite index, durable confirms), `perf record -g` on it while
# http_load runs, then tests/perf/perf_split.py: microseconds of server
# CPU per batch of 128 keys, by part (first touches of memory, index I/O,
# the kernel's side of requests, each library, pagefs).
#
# exists and get first write the keys they ask for (1 client, 1 second,
# not profiled). The profile is left in PERF_OUT if set (perf report -i).
#
# Usage: [PERF_OUT=FILE] tests/perf/http_profile.sh [BUILD_DIR] [write|exists|get] [CLIENTS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
OP=${2:-write}
CLIENTS=${3:-4}
SECS=${4:-5}
case $OP in write | exists | get) ;; *)
	echo "http_profile.sh: OP is write, exists or get" >&2
	exit 2
	;;
esac
command -v perf >/dev/null || {
	echo "http_profile.sh: needs perf (apt-get install -y linux-perf)" >&2
	exit 2
}
DIR=$(mktemp -d /tmp/pagefs-httpprof.XXXXXX)
PID='' PERFPID=''
cleanup() {
	[[ -n $PERFPID ]] && kill -INT "$PERFPID" 2>/dev/null && wait "$PERFPID" 2>/dev/null
	[[ -n $PID ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT
# shellcheck source=tests/perf/serve_meta.sh
. tests/perf/serve_meta.sh
serve_meta_start http_profile.sh "$BUILD" "$DIR" $((1 << 23)) "${THREADS:-}"
if [[ $OP != write ]]; then
	HTTP_LOAD_RUN=0 "$BUILD/http_load" "$PORT" write 1 1 "$PID" >/dev/null
fi
OUT=${PERF_OUT:-$DIR/perf.data}
perf record -F 2000 -g -p "$PID" -o "$OUT" 2>"$DIR/perf.err" &
PERFPID=$!
sleep 0.5
LINE=$(HTTP_LOAD_RUN=1 "$BUILD/http_load" "$PORT" "$OP" "$CLIENTS" "$SECS" "$PID")
kill -INT "$PERFPID"
wait "$PERFPID" 2>/dev/null || true
PERFPID=
echo "$LINE"
/usr/bin/python3 tests/perf/perf_split.py "$OUT" "$(sed -n 's/.*keys\/cpu_s=\([0-9.]*\).*/\1/p' <<<"$LINE")"
