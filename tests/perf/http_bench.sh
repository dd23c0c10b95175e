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
# PostgreSQL index instead of an SQLite file in the temporary directory,
# from one server for all measurements (below).
#
# With ROUNDS=N every measurement is taken N times, the two servers
# alternated, and the line gives medians: keys/s and keys per CPU second
# of each, and the median of the N ratios (listed after it). One run on
# this shared machine moves by a third; a median of 5 much less.
#
# Each write round runs on a fresh pair of servers, each first written to
# by 1 client for FILL seconds (default 1, not measured: both then have
# touched the tables they start with), so that every round measures the
# same thing: new keys (HTTP_LOAD_RUN) into a young index. The lookups run
# on a second pair that has first taken a write run of 1, 4 and 16
# clients of SECONDS each (not measured), and ask for keys of the first.
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
# Usage: [SGLANG_SRC=DIR] [META_URI=URI] [ROUNDS=N] [FILL=SECONDS] [FLOOR=1] tests/perf/http_bench.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
SECS=${2:-5}
ROUNDS=${ROUNDS:-1}
FILL=${FILL:-1}
DIR=$(mktemp -d /tmp/pagefs-httpbench.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$DIR"
}
trap cleanup EXIT

if [[ -n ${SGLANG_SRC:-} ]] && ! /usr/bin/python3 -c "import fastapi, uvicorn" 2>/dev/null; then
	echo "http_bench.sh: SGLANG_SRC needs Debian's python3-fastapi and python3-uvicorn" \
		"(apt-get install -y python3-fastapi python3-uvicorn)" >&2
	exit 2
fi

wait_port() { # FILE -> prints the port of the first "listening on ADDR:PORT"
	for _ in $(seq 100); do
		grep -q listening "$1" && break
		sleep 0.1
	done
	sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$1" | head -n 1
}
init() { /usr/bin/python3 -c "import requests; requests.post('http://127.0.0.1:$1/0/initialize', json={'num_pages': 1 << 23}).raise_for_status()"; }

# start_pagefs NAME: a serve-meta in $DIR/NAME (its SQLite index and
# backing; with META_URI the database, and the one backing it refers to);
# sets SPID and SPORT.
start_pagefs() {
	local d=$DIR/$1 backing=$DIR/$1/backing
	[[ -n ${META_URI:-} ]] && backing=$DIR/pg-backing
	mkdir -p "$d" "$backing"
	"$BUILD/pagefs" serve-meta --backing "$backing" --meta "${META_URI:-sqlite:$d/index.db}" \
		--listen 127.0.0.1:0 --page-size 4K --log-level warn >"$d/out" 2>"$d/err" &
	SPID=$!
	PIDS+=("$SPID")
	SPORT=$(wait_port "$d/out")
	if [[ -z $SPORT ]]; then
		echo "http_bench.sh: serve-meta did not start:" >&2
		cat "$d/err" >&2
		exit 1
	fi
	init "$SPORT"
}

# start_python NAME: SGLang's server, its output in $DIR/NAME; sets SPID
# and SPORT.
start_python() {
	local d=$DIR/$1
	mkdir -p "$d"
	SPORT=$(/usr/bin/python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
	/usr/bin/python3 tests/perf/py_meta_server.py "$SGLANG_SRC" "$SPORT" >"$d/out" 2>"$d/err" &
	SPID=$!
	PIDS+=("$SPID")
	wait_port "$d/out" >/dev/null
	sleep 1
	init "$SPORT"
}

stop() { # PID NAME: stops a server started for one round, removes its files
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	rm -rf "${DIR:?}/$2"
}

field() { sed -n "s#.* $1=\([0-9.]*\).*#\1#p"; }
median() { # of the numbers on stdin: two decimals if they have any, else whole
	sort -g | awk '{ v[NR] = $1; if (index($1, ".")) dec = 1 }
		END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		      printf (dec ? "%.2f\n" : "%.0f\n"), m }'
}

# The lookup pair, with their keys: write runs 0, 1 and 2 (run 0's keys
# are the ones exists and get ask for).
start_pagefs lookups
PID=$SPID PORT=$SPORT
PYPID='' PYPORT=''
if [[ -n ${SGLANG_SRC:-} ]]; then
	start_python lookups-py
	PYPID=$SPID PYPORT=$SPORT
fi
FLPID='' FLPORT=''
if [[ -n $PYPID && ${FLOOR:-} == 1 ]]; then
	"$BUILD/http_floor" >"$DIR/flout" 2>"$DIR/flerr" &
	FLPID=$!
	PIDS+=("$FLPID")
	FLPORT=$(wait_port "$DIR/flout")
fi
run=0
for c in 1 4 16; do
	HTTP_LOAD_RUN=$run "$BUILD/http_load" "$PORT" write "$c" "$SECS" >/dev/null
	if [[ -n $PYPID ]]; then
		HTTP_LOAD_RUN=$run "$BUILD/http_load" "$PYPORT" write "$c" "$SECS" >/dev/null
	fi
	run=$((run + 1))
done

# measure OP C SERVER: one measurement of a server (pagefs, python or
# floor): writes on a fresh server filled first (FILL), lookups on the
# lookup pair. With META_URI pagefs writes on its lookup server too: a
# second serve-meta on the database would be a second node. Prints
# http_load's line.
measure() {
	local op=$1 c=$2 who=$3 pid port line
	if [[ $op != write || $who == floor || ($who == pagefs && -n ${META_URI:-}) ]]; then
		case $who in pagefs) pid=$PID port=$PORT ;; python) pid=$PYPID port=$PYPORT ;; floor) pid=$FLPID port=$FLPORT ;; esac
		HTTP_LOAD_RUN=$run "$BUILD/http_load" "$port" "$op" "$c" "$SECS" "$pid"
		return
	fi
	if [[ $who == pagefs ]]; then start_pagefs round; else start_python round; fi
	HTTP_LOAD_RUN=$run "$BUILD/http_load" "$SPORT" write 1 "$FILL" >/dev/null
	line=$(HTTP_LOAD_RUN=$((run + 1)) "$BUILD/http_load" "$SPORT" write "$c" "$SECS" "$SPID")
	stop "$SPID" round
	echo "$line"
}

for op in write exists get; do
	for c in 1 4 16; do
		if [[ -z $PYPID ]]; then
			for ((r = 0; r < ROUNDS; r++)); do
				echo "pagefs $(measure "$op" "$c" pagefs)"
				run=$((run + 2))
			done
			continue
		fi
		# ROUNDS measurements of each server, alternated; medians, and
		# the median of each round's ratio
		ka=() kb=() ra=() rb=() ratios=() kf=() ceilings=() ma=() mb=()
		for ((r = 0; r < ROUNDS; r++)); do
			a=$(measure "$op" "$c" pagefs)
			b=$(measure "$op" "$c" python)
			run=$((run + 2))
			ka+=("$(field keys/cpu_s <<<"$a")") kb+=("$(field keys/cpu_s <<<"$b")")
			ra+=("$(field keys/s <<<"$a")") rb+=("$(field keys/s <<<"$b")")
			ma+=("$(field rss_bytes/written <<<"$a")") mb+=("$(field rss_bytes/written <<<"$b")")
			ratios+=("$(awk -v a="${ka[-1]}" -v b="${kb[-1]}" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')")
			if [[ -n $FLPID ]]; then
				f=$(measure "$op" "$c" floor)
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
			printf ' rss_bytes/key pagefs=%s python=%s' "$(printf '%s\n' "${ma[@]}" | median)" \
				"$(printf '%s\n' "${mb[@]}" | median)"
		fi
		if ((ROUNDS > 1)); then printf " (rounds: %s)" "${ratios[*]}"; fi
		printf '\n'
	done
done
