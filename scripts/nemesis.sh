#!/usr/bin/env bash
# nemesis.sh - several pagefs nodes on one PostgreSQL index under faults,
# every read checked (tests/nemesis/nemesis.py; docs/NEMESIS.md).
#
#   scripts/nemesis.sh                      # about 60 s (NEMESIS_SECONDS)
#   NEMESIS_SECONDS=1800 scripts/nemesis.sh # the long run
#   NEMESIS_SEED=N ...                      # replay a run's choices
#
# Runs in a temporary directory with its own PostgreSQL server (never the
# tests' one: the nemesis restarts it). Whatever happens, even on Ctrl-C,
# every mount under that directory is unmounted, every daemon it started
# killed and the server stopped before it exits. Exit 0 only when the
# checker found nothing wrong. NEMESIS_KEEP=1 keeps the directory (logs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
export PAGEFS_BIN=${PAGEFS_BIN:-$ROOT/build/pagefs}
[[ -x $PAGEFS_BIN ]] || {
	echo "nemesis.sh: no $PAGEFS_BIN: run scripts/build.sh" >&2
	exit 2
}
WORK=$(mktemp -d /tmp/pagefs-nemesis.XXXXXX) || exit 1
chmod 755 "$WORK"

mounts_under() {
	local dev mp rest
	while read -r dev mp rest; do
		mp=$(printf '%b' "$mp")
		[[ $mp == "$WORK"/* ]] && printf '%s\n' "$mp"
	done </proc/self/mounts | sort -r
}

cleanup() {
	local rc=$? mp pid
	trap - EXIT INT TERM
	if [[ -n ${PY:-} ]] && kill -0 "$PY" 2>/dev/null; then
		kill -TERM "$PY" 2>/dev/null
		wait "$PY" 2>/dev/null
	fi
	# What the Python side may have left (it was killed, say): daemons by
	# the pid each mount reported, then the mounts, then the server.
	for f in "$WORK"/node*/mnt; do
		[[ -d $f ]] || continue
		pid=$(getfattr --only-values -n user.pagefs.pid "$f" 2>/dev/null) || pid=""
		[[ -n $pid ]] && kill -CONT "$pid" 2>/dev/null
	done
	while IFS= read -r mp; do
		[[ -n $mp ]] || continue
		echo "nemesis.sh: cleaning up mount $mp" >&2
		timeout 70 "$PAGEFS_BIN" umount --timeout 60 "$mp" >/dev/null 2>&1 ||
			umount -l "$mp" 2>/dev/null || fusermount3 -u -z "$mp" 2>/dev/null ||
			echo "nemesis.sh: could not unmount $mp; unmount it by hand" >&2
	done < <(mounts_under)
	bash scripts/pg_test.sh stop "$WORK/pg"
	if [[ -n $(mounts_under) ]]; then
		echo "nemesis.sh: mounts remain under $WORK; not removing it" >&2
	elif [[ ${NEMESIS_KEEP:-0} == 1 || $rc != 0 ]]; then
		echo "nemesis.sh: logs kept in $WORK (node*/log, events/, pg/server.log)" >&2
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'echo "nemesis.sh: interrupted" >&2; exit 130' INT TERM

/usr/bin/python3 tests/nemesis/nemesis.py "$WORK" &
PY=$!
wait "$PY"
