#!/usr/bin/env bash
# soak.sh - the long reliability runs that do not fit CI (scripts/test.sh
# runs the same tests with small counts):
#
#   - crash loop: PAGEFS_CRASH_CYCLES (default 150) kill -9 / mount cycles
#     under a mixed load from several processes, every recovery checked
#     against the load's journals (tests/integration/test_crash_loop.py)
#   - kill -9 while mounting a large index (PAGEFS_LOAD_KILLS, default 30)
#     and while clearing a pool (tests/integration/test_crash_phases.py)
#   - the model test with a random seed and PAGEFS_MODEL_OPS (default
#     1,000,000) operations (tests/integration/test_model.py)
#   - ThreadSanitizer: the concurrency and SGLang-pattern tests against a
#     SANITIZER=thread build (build-tsan/); a race report fails the run
#   - the libFuzzer targets (tests/fuzz/, built in build-fuzz/ with clang,
#     ASan and UBSan: names and sizes, import-json, mount options, pool
#     xattr values, HTTP request bodies) for PAGEFS_FUZZ_SECONDS (default
#     600) each, on a corpus kept in build-fuzz/corpus/ across runs (seeded
#     from tests/fuzz/corpus/)
#   - valgrind memcheck: a short run of integration tests with the daemon
#     under valgrind (scripts/valgrind.sh)
#
# Parts: crash (crash loop, crash phases, model), tsan, fuzz, valgrind.
# SOAK_SKIP=tsan,fuzz skips parts; SOAK_ONLY=valgrind runs only those.
#
# against build/pagefs (SOAK_BUILD=build-asan for the sanitizer binary).
# Usage: scripts/soak.sh [PYTEST_ARGS...]; PAGEFS_CRASH_SEED fixes the seed.
# Prints the figures ("[crash-loop] ...") and pytest's summary; exits non-zero
# on failure. Never leaves a mount behind.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${SOAK_BUILD:-build}
NAME=soak.sh
. scripts/workdir.sh # WORK, removed at exit with any mount under it
trap 'echo "soak.sh: interrupted" >&2; exit 130' INT TERM

if [[ ! -x $BUILD/pagefs ]]; then
	if [[ $BUILD == build-asan ]]; then
		BUILD_DIR=$BUILD bash scripts/build.sh address,undefined || exit 1
	else
		BUILD_DIR=$BUILD bash scripts/build.sh || exit 1
	fi
fi

skip=,${SOAK_SKIP:-},
only=,${SOAK_ONLY:-},
part() { # NAME: run this part?
	[[ $skip != *,$1,* && ($only == ,, || $only == *,$1,*) ]]
}

rc=0
cycles=${PAGEFS_CRASH_CYCLES:-150}
mkdir -p "$WORK/tmp" "$WORK/state"
if part crash; then
	env PAGEFS_BIN="$ROOT/$BUILD/pagefs" \
		TMPDIR="$WORK/tmp" PAGEFS_IT_TMPDIR="$WORK/tmp" XDG_STATE_HOME="$WORK/state" \
		PAGEFS_CRASH_CYCLES="$cycles" \
		PAGEFS_LOAD_KILLS="${PAGEFS_LOAD_KILLS:-30}" \
		PAGEFS_MODEL_OPS="${PAGEFS_MODEL_OPS:-1000000}" \
		PAGEFS_MODEL_SEED="${PAGEFS_MODEL_SEED:-$RANDOM$RANDOM}" \
		ASAN_OPTIONS="detect_leaks=1" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
		/usr/bin/python3 -m pytest -q -s -rfEs -p no:cacheprovider --basetemp="$WORK/pytest" \
		tests/integration/test_crash_loop.py tests/integration/test_crash_phases.py \
		tests/integration/test_model.py "$@" 2>&1 |
		grep -vE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T' # daemon log lines of passing tests
	rc=${PIPESTATUS[0]}
fi

# ThreadSanitizer on the concurrency tests. The fixtures point the daemon's
# TSan log_path into the mount's temp dir and fail the test on a report,
# as they do for ASan.
if part tsan; then
	echo "soak.sh: ThreadSanitizer (build-tsan)"
	if BUILD_DIR=build-tsan bash scripts/build.sh thread >"$WORK/build-tsan.log" 2>&1; then
		mkdir -p "$WORK/tmp-tsan"
		env PAGEFS_BIN="$ROOT/build-tsan/pagefs" \
			TMPDIR="$WORK/tmp-tsan" PAGEFS_IT_TMPDIR="$WORK/tmp-tsan" XDG_STATE_HOME="$WORK/state" \
			PAGEFS_IT_STRESS_SECONDS="${PAGEFS_IT_STRESS_SECONDS:-60}" \
			TSAN_OPTIONS="second_deadlock_stack=1" \
			/usr/bin/python3 -m pytest -q -rfEs -p no:cacheprovider --basetemp="$WORK/pytest-tsan" \
			tests/integration/test_concurrency.py tests/integration/test_sglang_pattern.py 2>&1 |
			grep -vE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T'
		((PIPESTATUS[0] == 0)) || rc=1
	else
		tail -n 30 "$WORK/build-tsan.log" >&2
		rc=1
	fi
fi

# libFuzzer: each target for a bounded time. The corpus grows in
# build-fuzz/corpus/TARGET from run to run (tests/fuzz/corpus/ keeps the
# seeds; merge finds into it with build-fuzz/TARGET -merge=1
# tests/fuzz/corpus/TARGET build-fuzz/corpus/TARGET).
# The targets that run command-line and HTTP code discard its stderr
# (-close_fd_mask=3); their checks still report (tests/fuzz/fuzz_index.h).
if part fuzz; then
	secs=${PAGEFS_FUZZ_SECONDS:-600}
	targets=(fuzz_names fuzz_state_json fuzz_options fuzz_xattr fuzz_serve)
	echo "soak.sh: libFuzzer targets, ${secs}s each (build-fuzz)"
	if cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPAGEFS_FUZZ=ON \
		-DSANITIZER=address,undefined >"$WORK/build-fuzz.log" 2>&1 &&
		cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}" \
			>>"$WORK/build-fuzz.log" 2>&1; then
		for target in "${targets[@]}"; do
			mask=0
			[[ $target == fuzz_options || $target == fuzz_xattr || $target == fuzz_serve ]] && mask=3
			corpus=build-fuzz/corpus/$target
			mkdir -p "$corpus"
			cp tests/fuzz/corpus/$target/* "$corpus/"
			t0=$(date +%s)
			if /usr/bin/time -f '%U %S' -o "$WORK/$target.cpu" \
				build-fuzz/$target -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1 \
				-close_fd_mask=$mask -artifact_prefix="$WORK/$target-" "$corpus" \
				>"$WORK/$target.log" 2>&1; then
				read -r user sys <"$WORK/$target.cpu"
				echo "soak.sh: $target: $(grep -E '^stat::number_of_executed_units' "$WORK/$target.log" |
					awk '{print $2}') runs in $(($(date +%s) - t0)) s (CPU ${user}s user + ${sys}s sys), corpus $(ls "$corpus" | wc -l) inputs, no finding"
			else
				tail -n 60 "$WORK/$target.log" >&2
				echo "soak.sh: $target found a crash: artifacts in $WORK (kept)" >&2
				PAGEFS_TEST_KEEP=1
				rc=1
			fi
		done
	else
		tail -n 30 "$WORK/build-fuzz.log" >&2
		rc=1
	fi
fi

# valgrind memcheck of the daemon on a short run of integration tests.
if part valgrind; then
	echo "soak.sh: valgrind memcheck (scripts/valgrind.sh)"
	bash scripts/valgrind.sh || rc=1
fi
exit "$rc"
