#!/usr/bin/env bash
# http_bench.sh - keys/s and keys per server CPU second of the 3FS metadata
# protocol (pagefs serve-meta) for batches of 128 keys at 1, 4 and 16
# clients: write (reserve_and_allocate + confirm_write), exists,
# get_page_indices. Every confirm is durable (journal, synchronous=OFF as
# --durability process).
#
# With SGLANG_SRC=/path/to/sglang (a checkout; never copied into pagefs),
# SGLang's own mini_3fs_metadata_server.py runs beside it under Debian's
# python3-fastapi and python3-uvicorn (tests/perf/py_meta_server.py) and
# every measurement is taken on both, one after the other, with the ratio
# of keys per CPU second.
#
# With META_URI=postgres://... (a database or schema of one's own; pagefs
# creates its tables there on first use) pagefs serves from that
# PostgreSQL index instead of an SQLite file in the temporary directory.
#
# With ROUNDS=N every exists and get measurement is taken N times, the two
# servers alternated, and the line gives medians: keys/s and keys per CPU
# second of each, and the median of the N ratios (listed after it). One
# run on this shared machine moves by a third; a median of 5 much less.
# Writes are measured once per client count, each run on keys no run
# wrote before (HTTP_LOAD_RUN), so that none rewrites existing keys.
#
# A write line also gives how much each server's resident memory grew per
# key written in the run: first touches of memory that cost this virtual
# machine 50 times what reused memory costs (build/fresh_memory).
#
# With FLOOR=1 (and SGLANG_SRC) every measurement is also taken on
# BUILD_DIR/http_floor (tests/perf/http_floor.c): a libmicrohttpd server set
# up as serve-meta's that answers the same requests with canned bytes. Its
# keys per CPU second over the Python server's ("ceiling") is the most any
# server on libmicrohttpd reaches against it on this machine.
#
# Usage: [SGLANG_SRC=DIR] [META_URI=URI] [ROUNDS=N] [FLOOR=1] tests/perf/http_bench.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
SECS=${2:-5}
ROUNDS=${ROUNDS:-1}
DIR=$(mktemp -d /tmp/pagefs-httpbench.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$DIR"
}
trap cleanup EXIT
mkdir "$DIR/backing"

wait_port() { # FILE -> prints the port of the first "listening on ADDR:PORT"
	for _ in $(seq 100); do
		grep -q listening "$1" && break
		sleep 0.1
	done
	sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$1" | head -n 1
}

"$BUILD/pagefs" serve-meta --backing "$DIR/backing" --meta "${META_URI:-sqlite:$DIR/index.db}" \
	--listen 127.0.0.1:0 --page-size 4K --threads 2 --log-level warn >"$DIR/out" 2>"$DIR/err" &
PID=$!
PIDS+=("$PID")
PORT=$(wait_port "$DIR/out")
init() { /usr/bin/python3 -c "import requests; requests.post('http://127.0.0.1:$1/0/initialize', json={'num_pages': 1 << 23}).raise_for_status()"; }
init "$PORT"

PYPID='' PYPORT=''
if [[ -n ${SGLANG_SRC:-} ]]; then
	if ! /usr/bin/python3 -c "import fastapi, uvicorn" 2>/dev/null; then
		echo "http_bench.sh: SGLANG_SRC needs Debian's python3-fastapi and python3-uvicorn" \
			"(apt-get install -y python3-fastapi python3-uvicorn)" >&2
		exit 2
	fi
	PYPORT=$(/usr/bin/python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
	/usr/bin/python3 tests/perf/py_meta_server.py "$SGLANG_SRC" "$PYPORT" >"$DIR/pyout" 2>"$DIR/pyerr" &
	PYPID=$!
	PIDS+=("$PYPID")
	wait_port "$DIR/pyout" >/dev/null
	sleep 1
	init "$PYPORT"
fi

FLPID='' FLPORT=''
if [[ -n $PYPID && ${FLOOR:-} == 1 ]]; then
	"$BUILD/http_floor" >"$DIR/flout" 2>"$DIR/flerr" &
	FLPID=$!
	PIDS+=("$FLPID")
	FLPORT=$(wait_port "$DIR/flout")
fi

field() { sed -n "s#.* $1=\([0-9.]*\).*#\1#p"; }
median() { # of the numbers on stdin: two decimals if they have any, else whole
	sort -g | awk '{ v[NR] = $1; if (index($1, ".")) dec = 1 }
		END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		      printf (dec ? "%.2f\n" : "%.0f\n"), m }'
}
writes=0 # write runs so far: each writes keys of its own (HTTP_LOAD_RUN)
for op in write exists get; do
	for c in 1 4 16; do
		# a write is measured once: another round would write other keys
		# into a fuller index, not the same measurement again
		rounds=$ROUNDS
		[[ $op == write ]] && rounds=1
		if [[ -z $PYPID ]]; then
			for ((r = 0; r < rounds; r++)); do
				echo "pagefs $(HTTP_LOAD_RUN=$writes "$BUILD/http_load" "$PORT" "$op" "$c" "$SECS" "$PID")"
			done
			if [[ $op == write ]]; then writes=$((writes + 1)); fi
			continue
		fi
		# rounds measurements of each server, alternated; medians, and
		# the median of each round's ratio
		ka=() kb=() ra=() rb=() ratios=() kf=() ceilings=() ma=() mb=()
		for ((r = 0; r < rounds; r++)); do
			a=$(HTTP_LOAD_RUN=$writes "$BUILD/http_load" "$PORT" "$op" "$c" "$SECS" "$PID")
			b=$(HTTP_LOAD_RUN=$writes "$BUILD/http_load" "$PYPORT" "$op" "$c" "$SECS" "$PYPID")
			ka+=("$(field keys/cpu_s <<<"$a")") kb+=("$(field keys/cpu_s <<<"$b")")
			ra+=("$(field keys/s <<<"$a")") rb+=("$(field keys/s <<<"$b")")
			ma+=("$(field rss_bytes/written <<<"$a")") mb+=("$(field rss_bytes/written <<<"$b")")
			ratios+=("$(awk -v a="${ka[-1]}" -v b="${kb[-1]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')")
			if [[ -n $FLPID ]]; then
				f=$("$BUILD/http_load" "$FLPORT" "$op" "$c" "$SECS" "$FLPID")
				kf+=("$(field keys/cpu_s <<<"$f")")
				ceilings+=("$(awk -v a="${kf[-1]}" -v b="${kb[-1]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')")
			fi
		done
		printf '%-6s clients=%-2s pagefs keys/s=%-8s keys/cpu_s=%-8s python keys/s=%-8s keys/cpu_s=%-8s ratio/cpu_s=%.1f' \
			"$op" "$c" "$(printf '%s\n' "${ra[@]}" | median)" "$(printf '%s\n' "${ka[@]}" | median)" \
			"$(printf '%s\n' "${rb[@]}" | median)" "$(printf '%s\n' "${kb[@]}" | median)" \
			"$(printf '%s\n' "${ratios[@]}" | median)"
		if [[ -n $FLPID ]]; then
			printf ' floor keys/cpu_s=%-8s ceiling/cpu_s=%.1f' "$(printf '%s\n' "${kf[@]}" | median)" \
				"$(printf '%s\n' "${ceilings[@]}" | median)"
		fi
		if [[ $op == write ]]; then
			printf ' rss_bytes/key pagefs=%s python=%s' "${ma[0]:-?}" "${mb[0]:-?}"
		fi
		if ((rounds > 1)); then printf " (rounds: %s)" "${ratios[*]}"; fi
		printf '\n'
		if [[ $op == write ]]; then writes=$((writes + 1)); fi
	done
done
