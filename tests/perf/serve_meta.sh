# shellcheck shell=bash
# serve_meta.sh - sourced by tests/perf/http_fill.sh and http_profile.sh:
# starts `pagefs serve-meta` as the protocol benchmarks run it (an SQLite
# index, durable confirms, 4 KiB pages, listening on a free port of
# 127.0.0.1) and initializes rank 0's pool "kv" with PAGES pages.
#
# serve_meta_start NAME BUILD DIR PAGES [THREADS]  (default: serve-meta's own)
#   NAME names the caller in errors; DIR holds the backing, the index and
#   the server's output. Sets PID and PORT; exits 1 if the server does
#   not start.
#   SERVE_ENV, if set, is the server's environment as VAR=VALUE words.
# serve_meta_stop DIR
#   Stops the server started (if any) and removes DIR: the callers' EXIT
#   trap.
# serve_meta_ticks
#   Prints the server's user and system CPU so far, in clock ticks.
serve_meta_start() {
	local name=$1 build=$2 dir=$3 pages=$4 thread_opt=()
	[[ -n ${5:-} ]] && thread_opt=(--threads "$5") # (else serve-meta's default)
	mkdir -p "$dir/backing"
	# shellcheck disable=SC2086 # (SERVE_ENV: VAR=VALUE words, or none)
	env ${SERVE_ENV:-} "$build/pagefs" serve-meta --backing "$dir/backing" --meta "sqlite:$dir/index.db" \
		--listen 127.0.0.1:0 --page-size 4K "${thread_opt[@]}" --log-level warn \
		>"$dir/out" 2>"$dir/err" &
	# shellcheck disable=SC2034 # (the caller's, for its cleanup)
	PID=$!
	for _ in $(seq 100); do
		grep -q listening "$dir/out" && break
		sleep 0.1
	done
	PORT=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$dir/out" | head -n 1)
	if [[ -z $PORT ]]; then
		echo "$name: serve-meta did not start:" >&2
		cat "$dir/err" >&2
		exit 1
	fi
	/usr/bin/python3 -c "import requests; requests.post('http://127.0.0.1:$PORT/0/initialize', json={'num_pages': $pages}).raise_for_status()"
}

serve_meta_stop() {
	if [[ -n ${PID:-} ]]; then
		kill "$PID" 2>/dev/null || true
		wait "$PID" 2>/dev/null || true
	fi
	rm -rf "$1"
}

serve_meta_ticks() { awk '{ print $14, $15 }' "/proc/$PID/stat"; }
