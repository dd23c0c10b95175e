#!/usr/bin/env bash
# http_bench.sh - keys/s and keys per server CPU second of the 3FS metadata
# protocol (pagefs serve-meta) for batches of 128 keys at 1, 4 and 16
# clients: write (reserve_and_allocate + confirm_write), exists,
# get_page_indices. Every confirm is durable (journal, synchronous=OFF as
# --durability process). Usage: tests/perf/http_bench.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
BUILD=${1:-build}
SECS=${2:-5}
DIR=$(mktemp -d /tmp/pagefs-httpbench.XXXXXX)
mkdir "$DIR/backing"
"$BUILD/pagefs" serve-meta --backing "$DIR/backing" --meta "sqlite:$DIR/index.db" \
	--listen 127.0.0.1:0 --page-size 4K --threads 2 --log-level warn >"$DIR/out" 2>"$DIR/err" &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 50); do grep -q listening "$DIR/out" && break; sleep 0.1; done
PORT=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\).*/\1/p' "$DIR/out")
/usr/bin/python3 -c "import requests; requests.post('http://127.0.0.1:$PORT/0/initialize', json={'num_pages': 1 << 23}).raise_for_status()"
for c in 1 4 16; do
	"$BUILD/http_load" "$PORT" write "$c" "$SECS" "$PID"
done
for op in exists get; do
	for c in 1 4 16; do
		"$BUILD/http_load" "$PORT" "$op" "$c" "$SECS" "$PID"
	done
done
