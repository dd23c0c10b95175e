#!/usr/bin/env bash
# valgrind.sh - a short run of integration tests with the daemon under
# valgrind memcheck (scripts/soak.sh runs it too; SOAK_SKIP=valgrind skips).
#
# The fixtures put PAGEFS_WRAPPER before `pagefs mount` and `pagefs
# serve-meta`; valgrind follows the mount's daemon through its fork (no
# exec: valgrind keeps tracing the child, and %p gives each process its
# own log in the mount's temp dir). A test
# fails when a log shows an error (invalid access, uninitialised value,
# a definitely or indirectly lost block) or has no summary (the process
# was killed before it exited). No suppressions: pagefs, libfuse, SQLite
# and glibc are clean here as they are.
#
# Usage: scripts/valgrind.sh [PYTEST_ARGS...] (default: the tests below)
# against build/pagefs (VALGRIND_BUILD=build-... for another build; a
# sanitizer build cannot run under valgrind). Prints pytest's summary and
# "valgrind: N daemon logs, N errors"; exits non-zero on failure. Never
# leaves a mount behind.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${VALGRIND_BUILD:-build}
NAME=valgrind.sh
. scripts/workdir.sh # WORK, removed at exit with any mount under it
trap 'echo "valgrind.sh: interrupted" >&2; exit 130' INT TERM

if ! command -v valgrind >/dev/null; then
	bash scripts/deps.sh || exit 1
fi
if [[ ! -x $BUILD/pagefs ]]; then
	BUILD_DIR=$BUILD bash scripts/build.sh >"$WORK/build.log" 2>&1 || {
		tail -n 30 "$WORK/build.log" >&2
		exit 1
	}
fi

# Page writes, reads, renames, unlinks, the xattrs, statfs, remounts (index
# load), eviction, and the HTTP protocol (mount --http and serve-meta, with
# its bad requests); not the tests that kill -9 the daemon (a killed
# process leaves no summary).
TESTS=(tests/integration/test_page_write.py tests/integration/test_rename_unlink.py
	tests/integration/test_pool_xattrs.py tests/integration/test_page_xattrs.py
	tests/integration/test_stat_statfs.py tests/integration/test_persistence.py
	tests/integration/test_eviction.py tests/integration/test_http_protocol.py
	-k "not kill_9 and not a_crash_leaves_it_readable")
(($# > 0)) && TESTS=("$@")

mkdir -p "$WORK/tmp" "$WORK/state"
start=$(date +%s)
# valgrind is 20-50 times slower: longer mount, exit and test limits.
# PAGEFS_HUGE_HEAP=0: the daemon must not execute itself again
# (tools/cli_heap.c), which would leave valgrind behind.
env PAGEFS_BIN="$ROOT/$BUILD/pagefs" PAGEFS_HUGE_HEAP=0 \
	PAGEFS_WRAPPER="valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --error-exitcode=99 --log-file={dir}/valgrind.%p" \
	PAGEFS_IT_EXIT_WAIT=120 PAGEFS_IT_MOUNT_TIMEOUT=180 PAGEFS_IT_TEST_TIMEOUT=900 \
	PAGEFS_IT_KEEP=1 \
	TMPDIR="$WORK/tmp" PAGEFS_IT_TMPDIR="$WORK/tmp" XDG_STATE_HOME="$WORK/state" \
	/usr/bin/python3 -m pytest -q -rfEs -p no:cacheprovider --basetemp="$WORK/pytest" \
	"${TESTS[@]}" 2>&1 | grep -vE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T'
rc=${PIPESTATUS[0]}
logs=$(find "$WORK/tmp" -name 'valgrind.*' | wc -l)
bad=$(find "$WORK/tmp" -name 'valgrind.*' -exec grep -L 'ERROR SUMMARY: 0 errors' {} + | wc -l)
echo "valgrind: $logs process logs (mount commands and daemons), $bad with errors or no summary, $(($(date +%s) - start)) s"
((logs > 0)) || rc=1
((bad == 0)) || rc=1
exit "$rc"
