#!/usr/bin/env bash
# nemesis.sh - several pagefs nodes on one PostgreSQL index under faults,
# every read checked (tests/nemesis/nemesis.py; docs/NEMESIS.md).
#
#   scripts/nemesis.sh                      # about 60 s (NEMESIS_SECONDS)
#   NEMESIS_SECONDS=1800 scripts/nemesis.sh # the long run
#   NEMESIS_SEED=N ...                      # replay a run's choices
#
# Runs in a temporary directory (under $TMPDIR, or /tmp) with its own
# PostgreSQL server (never the tests' one: the nemesis restarts it).
# Whatever happens, even on Ctrl-C or SIGTERM, every mount under that
# directory is unmounted, every daemon it started killed and the server
# stopped before it exits, in bounded time (under 2 minutes): nemesis.py
# gets 45 s to clean up after SIGTERM, then SIGKILL; what it left (found by
# the directory's path: scripts/leftovers.sh) is continued, its FUSE
# connections aborted, killed and lazily unmounted, and the run fails
# when anything was left ("nemesis.sh: left behind: PID CMD"). Nothing here
# touches a path inside a mount, which would block on a stopped daemon.
# Exit 0 only when the checker found nothing wrong. NEMESIS_KEEP=1 keeps
# the directory (logs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=scripts/proc_lib.sh
source scripts/proc_lib.sh
ROOT=$PWD
export PAGEFS_BIN=${PAGEFS_BIN:-$ROOT/build/pagefs}
[[ -x $PAGEFS_BIN ]] || {
	echo "nemesis.sh: no $PAGEFS_BIN: run scripts/build.sh" >&2
	exit 2
}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pagefs-nemesis.XXXXXX") || exit 1
chmod 755 "$WORK"

leftovers() {
	bash scripts/leftovers.sh --as nemesis.sh "$@" "$WORK"
}

cleanup() {
	local rc=$?
	# Bounded as it is, the cleanup runs to its end: a further SIGTERM or
	# SIGINT (timeout(1) signals this process, then its group) is caught and
	# dropped. Caught, not ignored: the programs it runs get the default.
	trap - EXIT
	trap : INT TERM
	if [[ -n ${PY:-} ]] && ! gone "$PY"; then
		kill -TERM "$PY" 2>/dev/null
		local t0=$SECONDS
		while ! gone "$PY" && ((SECONDS - t0 < 45)); do
			sleep 0.5
		done
		if ! gone "$PY"; then
			echo "nemesis.sh: nemesis.py did not end within $((SECONDS - t0)) s of SIGTERM: SIGKILL" >&2
			kill -KILL "$PY" 2>/dev/null
		fi
	fi
	# nemesis.py stops everything it started; what it left (it was killed,
	# say) is a leak: the server stopped, the rest continued, its FUSE
	# connections aborted, killed and lazily unmounted, and the run fails.
	# (nemesis.py itself, in D state on a stopped daemon's mount, dies only
	# then: it is waited for only once it is gone.)
	timeout -k 5 60 bash scripts/pg_test.sh stop "$WORK/pg" </dev/null
	if ! leftovers --kill >&2; then
		echo "nemesis.sh: processes or mounts were left behind (above)" >&2
		((rc == 0)) && rc=1
	fi
	[[ -n ${PY:-} ]] && gone "$PY" && wait "$PY" 2>/dev/null
	if [[ -n $(mounts_under "$WORK") ]]; then
		echo "nemesis.sh: mounts remain under $WORK; not removing it" >&2
	elif [[ ${NEMESIS_KEEP:-0} == 1 || $rc != 0 ]]; then
		echo "nemesis.sh: logs kept in $WORK (node*/log, events/, pg/server.log)" >&2
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'trap : INT TERM; echo "nemesis.sh: interrupted" >&2; exit 130' INT TERM

/usr/bin/python3 tests/nemesis/nemesis.py "$WORK" </dev/null &
PY=$!
wait "$PY"
