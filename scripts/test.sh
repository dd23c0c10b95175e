#!/usr/bin/env bash
# test.sh - everything CI checks, in one run (.ci/run calls this).
#
#   1. dependencies (scripts/deps.sh), and a private PostgreSQL server
#      (scripts/pg_test.sh: a Unix socket in a temporary directory) whose URI
#      is exported as PAGEFS_TEST_PG_URI for the unit and integration tests
#   2. two builds: build/ (plain) and build-asan/ (SANITIZER=address,undefined)
#   3. Criterion unit tests through ctest (label "unit") in both builds
#   4. the pytest integration suite (tests/integration, and tests/python:
#      the Python package python/pagefs on real mounts) against the ASan
#      binary, then the plain one (PAGEFS_BIN); the suite fails a test when
#      a pagefs process (the daemon included) writes a sanitizer report
#      (PAGEFS_INTEGRATION=0 skips both passes: for checking this script)
#   4b. the package (scripts/package_test.sh): cpack -G DEB from build/,
#      apt-get install ./pagefs_*.deb, pagefs --version, mount -t fuse.pagefs
#      from the installed files, apt-get remove (about 10 s; PAGEFS_PACKAGE=0
#      skips it)
#   4c. the nemesis (scripts/nemesis.sh, PAGEFS_NEMESIS_SECONDS=60; 0 skips;
#      PAGEFS_NEMESIS_FAULTS, every fault by default; PAGEFS_NEMESIS_LIMIT,
#      the step's limit, PAGEFS_NEMESIS_SECONDS + 600 by default):
#      three nodes on one PostgreSQL index under faults, every read checked
#   5. clang-format --dry-run -Werror over fs/ meta/ serve/ tools/ tests/unit/
#   6. clang-tidy (.clang-tidy) over the .c files of fs/ meta/ serve/ tools/,
#      when clang-tidy is installed (PAGEFS_TIDY=0 skips it; PAGEFS_TIDY=1
#      fails when it is missing)
#   7. leftovers: no process or mount of the run may outlive its step
#      (scripts/leftovers.sh, below)
#
# Ends with a table of the steps (counts and wall time of each) and "N
# passed, N failed, N skipped"; exits non-zero on any failure.
#
# Nothing can hang it. Every step runs with a limit (LIMIT_* below; the
# nemesis: PAGEFS_NEMESIS_SECONDS + 600 s) under `timeout -k`: SIGTERM at
# the limit, SIGKILL to the step's process group GRACE s later. A step that
# ran over its limit fails, saying so, and what it left is ended at once:
# SIGKILL cannot end a process in D state on the mount of a stopped or
# wedged FUSE daemon (a close() waits for the daemon's answer to its
# flush), so scripts/leftovers.sh continues the run's processes, aborts
# its FUSE connections, then kills. A watchdog does the same, and kills the
# step's group, should the step still run 30 s after its SIGKILL. Steps
# run with stdin from /dev/null and their output in a log under $WORK
# (shown live or summed up): a process a step leaves behind can hold a log
# file open, never this script's stdout, so a caller waiting for its
# output to end (CI) is not kept waiting.
#
# Everything runs in one temporary directory, $WORK (under $TMPDIR, or
# /tmp): TMPDIR points into it for every step, so mounts, daemons and
# servers the steps start name it. At the end (and on exit, even when
# interrupted) what is left of the run is listed as "test.sh: left behind:
# PID CMD" (or "mount MP") and ended (SIGCONT, SIGKILL, lazy unmount); a
# leftover at the end is a failed step, "leftovers": it would keep a daemon
# or a mount on a developer's machine, and CI's output open. The private
# PostgreSQL server is stopped. PAGEFS_TEST_KEEP=1 keeps the logs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/proc_lib.sh
source scripts/proc_lib.sh
ROOT=$PWD

# Limits in seconds of the steps, each generous for a loaded 2-core machine
# (a whole run takes about 20 minutes), and GRACE between SIGTERM and SIGKILL.
LIMIT_DEPS=900        # apt-get update and install; dpkg's lock waits 600 s
LIMIT_PG=180          # initdb, pg_ctl start -w -t 60, createdb; and stop
LIMIT_BUILD=1200      # one build
LIMIT_UNIT=1200       # ctest of one build (each test binary: 300)
LIMIT_INTEGRATION=1200 # one pass of the pytest suite (each test: its watchdog)
LIMIT_PACKAGE=900     # cpack, apt-get install (lock: 600), mount, remove
LIMIT_FORMAT=300
LIMIT_TIDY=1200       # all files (each file: 300)
GRACE=60

# The run's temporary directory; postgres (as root the server runs as that
# user) must reach the nemesis's server under it.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pagefs-test.XXXXXX") || exit 1
chmod 755 "$WORK"
mkdir -p "$WORK/tmp"
chmod 1777 "$WORK/tmp"
# The private PostgreSQL server's directory, once started: beside $WORK,
# so that a sweep of a step's leftovers (all of $WORK) spares it.
PG_DIR=""
BUILD_DIRS=("$ROOT/build" "$ROOT/build-asan")
PASSED=0
FAILED=0
SKIPPED=0
SUMMARY=()
STEP_T0=$SECONDS
STEP_NAME="setup"
STEP_PID="" # the running step's timeout(1), the leader of its process group
STEP_AUX=() # its watchdog and output follower
INTERRUPTED=0
DONE=0

# ---- running a step: bounded, detached from our stdout ----

# leftovers [--kill] [DIR...]: the run's processes and mounts
# (scripts/leftovers.sh): those naming $WORK and the DIRs, or running from
# a build directory.
leftovers() {
	local kill=()
	[[ ${1:-} == --kill ]] && kill=(--kill) && shift
	bash "$ROOT/scripts/leftovers.sh" "${kill[@]}" --as test.sh \
		--bin "${BUILD_DIRS[0]}" --bin "${BUILD_DIRS[1]}" "$WORK" "$@"
}

# watchdog PID SECONDS: when PID (a step's timeout) still runs after
# SECONDS, something SIGKILL could not end holds it: unwedge the run's
# processes and mounts, then kill the step's process group.
# It ends within a second of the step (no process of it outlives the step).
watchdog() {
	local pid=$1 end=$((SECONDS + $2))
	while [[ -e /proc/$pid ]]; do
		if ((SECONDS >= end)); then
			echo "test.sh: watchdog: the step still runs $2 s after it began; ending the run's processes"
			leftovers --kill
			kill -KILL -- -"$pid" "$pid" 2>/dev/null
			return
		fi
		sleep 1
	done
}

# run_step [--show] [--grace S] LIMIT LOG CMD...: runs CMD with stdin from
# /dev/null and its output in LOG (followed live with --show), in its own
# process group, for at most LIMIT s (then SIGTERM, SIGKILL GRACE s later,
# the watchdog 30 s after that). Returns CMD's status; 124 or 137 when it
# ran over its limit (STEP_OVER=1 then, the log says so, and what the step
# left is ended).
run_step() {
	local show=0 grace=$GRACE limit log rc wd t0 tl=""
	while :; do
		case $1 in
		--show) show=1 ;;
		--grace)
			grace=$2
			shift
			;;
		*) break ;;
		esac
		shift
	done
	limit=$1 log=$2
	shift 2
	STEP_OVER=0
	: >"$log"
	t0=$SECONDS
	timeout -k "$grace" "$limit" "$@" </dev/null >>"$log" 2>&1 &
	STEP_PID=$!
	watchdog "$STEP_PID" $((limit + grace + 30)) </dev/null >>"$log" 2>&1 &
	wd=$!
	if ((show)); then
		# Ends once the step is reaped (by the wait below): --pid.
		tail -n +1 -f --pid="$STEP_PID" "$log" &
		tl=$!
	fi
	STEP_AUX=("$wd" ${tl:+"$tl"})
	wait "$STEP_PID"
	rc=$?
	STEP_PID=""
	wait "$wd" ${tl:+"$tl"}
	STEP_AUX=()
	if ((rc == 124 || rc == 137)) && ((SECONDS - t0 >= limit)); then
		STEP_OVER=1
		echo "test.sh: ran over its limit of $limit s and was stopped (status $rc): $*" |
			tee -a "$log" >&2
		# What it left must not disturb the next steps.
		leftovers --kill >&2
	fi
	return "$rc"
}

# Ends the step that runs now (on an interruption): SIGTERM to its process
# group, SIGKILL after 20 s, then the watchdog's unwedging.
stop_step() {
	local pid=$STEP_PID
	[[ -n $pid ]] || return 0
	echo "test.sh: stopping the running step (pid $pid)" >&2
	kill -TERM -- -"$pid" "$pid" 2>/dev/null
	for _ in $(seq 40); do
		gone "$pid" && break
		sleep 0.5
	done
	gone "$pid" || kill -KILL -- -"$pid" "$pid" 2>/dev/null
	kill "${STEP_AUX[@]}" 2>/dev/null # its watchdog and follower: not leftovers
	leftovers --kill >&2
	STEP_PID=""
}

pg_stop() {
	[[ -n $PG_DIR ]] || return 0
	timeout -k 10 "$LIMIT_PG" bash scripts/pg_test.sh stop "$PG_DIR" </dev/null
}

# ---- never leave anything behind ----

cleanup() {
	local rc=$?
	# Bounded as it is, the cleanup runs to its end: a further SIGTERM or
	# SIGINT (timeout(1) signals this process, then its group) is caught and
	# dropped. Caught, not ignored: the programs it runs get the default.
	trap - EXIT
	trap : INT TERM
	stop_step
	if ((!DONE)); then
		# Interrupted (or a bug): the table so far, so the log says how far it got.
		record "$( ((INTERRUPTED)) && echo interrupted || echo "ended early")" 0 1 0 \
			"in step '$STEP_NAME'"
		print_summary
		((rc == 0)) && rc=1
	fi
	pg_stop
	# Each step cleans up after itself, and the end of the run checked:
	# this finds something only after an interruption or a bug here.
	leftovers --kill ${PG_DIR:+"$PG_DIR"} >&2
	[[ -n $PG_DIR ]] && rm -rf "$PG_DIR"
	if [[ -n $(mounts_under "$WORK") ]]; then
		# Never rm -rf across a mount: it would delete through it.
		echo "test.sh: mounts remain under $WORK; not removing it" >&2
	elif [[ ${PAGEFS_TEST_KEEP:-0} == 1 ]]; then
		echo "test.sh: logs kept in $WORK" >&2
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'trap : INT TERM; INTERRUPTED=1; echo "test.sh: interrupted" >&2; exit 130' INT TERM

# ---- bookkeeping ----

# section TITLE: a step begins (its wall time counts from here).
section() {
	STEP_NAME=$*
	STEP_T0=$SECONDS
	printf '\n==== %s ====\n' "$*"
}

# record NAME PASSED FAILED SKIPPED [DETAIL]: a line of the summary, with
# the wall time since the last section.
record() {
	PASSED=$((PASSED + $2))
	FAILED=$((FAILED + $3))
	SKIPPED=$((SKIPPED + $4))
	SUMMARY+=("$(printf '%-28s %4d passed, %4d failed, %4d skipped %8s%s' "$1" "$2" "$3" "$4" \
		"($((SECONDS - STEP_T0)) s)" "${5:+   ($5)}")")
}

print_summary() {
	section "summary"
	printf '%s\n' "${SUMMARY[@]}"
	echo
	echo "$PASSED passed, $FAILED failed, $SKIPPED skipped (${SECONDS} s)"
}

# Counts "passed failed skipped" in JUnit XML files (ctest's, pytest's,
# Criterion's). A file that is missing or unreadable counts as nothing.
junit_counts() {
	/usr/bin/python3 - "$@" <<'EOF'
import sys
import xml.etree.ElementTree as ET
t = f = s = 0
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except Exception:
        continue
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    for su in suites:
        t += int(su.get("tests", 0) or 0)
        f += int(su.get("failures", 0) or 0) + int(su.get("errors", 0) or 0)
        s += int(su.get("skipped", 0) or su.get("disabled", 0) or 0)
print(max(t - f - s, 0), f, s)
EOF
}

# Unit test counts of a build: Criterion's per-test XML of every test
# binary; a binary that left no XML (crashed, timed out) counts as one
# test, failed when ctest failed it.
unit_counts() { # CTEST_JUNIT RESULTS_DIR
	/usr/bin/python3 - "$1" "$2" <<'EOF'
import os
import sys
import xml.etree.ElementTree as ET
ctest, results = sys.argv[1], sys.argv[2]
p = f = s = 0
try:
    cases = list(ET.parse(ctest).getroot().iter("testcase"))
except Exception:
    cases = []
for case in cases:
    name = case.get("name", "")
    failed = (case.find("failure") is not None or case.find("error") is not None
              or case.get("status") == "fail")
    xml = os.path.join(results, name[len("unit_"):] + ".xml")
    try:
        root = ET.parse(xml).getroot()
    except Exception:
        root = None
    if root is None:
        p, f = (p, f + 1) if failed else (p + 1, f)
        continue
    for su in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
        tt = int(su.get("tests", 0) or 0)
        ff = int(su.get("failures", 0) or 0) + int(su.get("errors", 0) or 0)
        ss = int(su.get("skipped", 0) or su.get("disabled", 0) or 0)
        p, f, s = p + max(tt - ff - ss, 0), f + ff, s + ss
print(p, f, s)
EOF
}

# ---- 1. dependencies ----

section "dependencies"
if ! run_step --show "$LIMIT_DEPS" "$WORK/deps.log" bash scripts/deps.sh; then
	echo "test.sh: installing dependencies failed; run scripts/deps.sh as root" >&2
	exit 1
fi
record "dependencies" 1 0 0

section "PostgreSQL (private test server)"
# Its own directory beside $WORK (mode 0700 from mktemp; as root the server
# runs as the postgres user, which must reach its socket and data directory).
PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/pagefs-pg.XXXXXX") || exit 1
# pg_ctl gives the server its log file as output: the $(...) ends.
if PAGEFS_TEST_PG_URI=$(timeout -k 10 "$LIMIT_PG" bash scripts/pg_test.sh start "$PG_DIR" </dev/null); then
	export PAGEFS_TEST_PG_URI
	echo "PAGEFS_TEST_PG_URI=$PAGEFS_TEST_PG_URI"
	record "postgres server" 1 0 0
else
	echo "test.sh: the private PostgreSQL server did not start (log above)" >&2
	record "postgres server" 0 1 0 "scripts/pg_test.sh start failed"
fi
if [[ ! -c /dev/fuse ]]; then
	echo "test.sh: /dev/fuse is missing: integration tests need FUSE (in a container: --device /dev/fuse --cap-add SYS_ADMIN)" >&2
fi
# From here on whatever the steps create lands in $WORK.
export TMPDIR=$WORK/tmp

# ---- 2. builds ----

BUILDS=()
for variant in plain asan; do
	if [[ $variant == plain ]]; then
		dir=build san=""
	else
		dir=build-asan san=address,undefined
	fi
	section "build $dir${san:+ (SANITIZER=$san)}"
	if run_step "$LIMIT_BUILD" "$WORK/build-$variant.log" \
		env BUILD_DIR="$dir" bash scripts/build.sh ${san:+"$san"}; then
		tail -n 1 "$WORK/build-$variant.log"
		record "build $dir" 1 0 0
		BUILDS+=("$dir")
	else
		tail -n 40 "$WORK/build-$variant.log"
		echo "test.sh: build of $dir failed (full log above)" >&2
		record "build $dir" 0 1 0 "$( ((STEP_OVER)) && echo "over its $LIMIT_BUILD s limit")"
	fi
done

# ---- 3. unit tests ----

for dir in "${BUILDS[@]}"; do
	section "unit tests ($dir)"
	xml=$WORK/unit-$dir.xml
	log=$WORK/unit-$dir.log
	rm -f "$dir"/unit-results/*.xml
	run_step --show "$LIMIT_UNIT" "$log" ctest --test-dir "$dir" -L unit --output-on-failure \
		--timeout 300 --output-junit "$xml"
	rc=$?
	line=$(grep -E 'tests passed|No tests were found' "$log" | tail -n 1)
	((STEP_OVER)) && line="over its $LIMIT_UNIT s limit"
	read -r p f s < <(unit_counts "$xml" "$dir/unit-results")
	((rc != 0 && f == 0)) && f=1
	record "unit ($dir)" "$p" "$f" "$s" "ctest: $line"
done

# ---- 4. integration tests ----

run_integration() { # DIR [PG_SKIP_REASON]
	local dir=$1 bin=$ROOT/$1/pagefs tag=${1//\//_} rc p f s line pg_skip=${2:-}
	local xml=$WORK/integration-$tag.xml log=$WORK/integration-$tag.log
	mkdir -p "$WORK/tmp-$tag" "$WORK/state-$tag"
	section "integration tests ($dir)"
	# TMPDIR, PAGEFS_IT_TMPDIR and --basetemp keep every mount under $WORK
	# for the cleanup trap; XDG_STATE_HOME keeps default indexes out of the
	# user's home. The suite's fixtures point each daemon's sanitizer
	# log_path into its mount's directory and fail the test on a report.
	run_step --show --grace 30 "$LIMIT_INTEGRATION" "$log" env PAGEFS_BIN="$bin" \
		PAGEFS_IT_PG_SKIP="$pg_skip" \
		TMPDIR="$WORK/tmp-$tag" \
		PAGEFS_IT_TMPDIR="$WORK/tmp-$tag" \
		XDG_STATE_HOME="$WORK/state-$tag" \
		ASAN_OPTIONS="detect_leaks=1" \
		UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
		/usr/bin/python3 -m pytest -q -rfEs --durations=5 -p no:cacheprovider \
		--basetemp="$WORK/pytest-$tag" --junitxml="$xml" tests/integration tests/python
	rc=$?
	# pytest's own summary ("3 failed, 40 passed in 12.3s"), with or without ===.
	line=$(grep -E '(passed|failed|error|skipped|deselected|no tests ran).* in [0-9.]+s' "$log" |
		tail -n 1 | sed -E 's/^=+ //; s/ =+$//')
	read -r p f s < <(junit_counts "$xml")
	# 5: no tests collected; anything else non-zero must show as a failure.
	if ((STEP_OVER)); then
		line="over its $LIMIT_INTEGRATION s limit${line:+; $line}"
		f=$((f + 1))
	elif ((rc == 5)); then
		line="no integration tests collected"
	elif ((rc != 0 && f == 0)); then
		f=1
	fi
	record "integration ($dir)" "$p" "$f" "$s" "$line"
}

if [[ ${PAGEFS_INTEGRATION:-1} == 0 ]]; then
	section "integration tests"
	echo "test.sh: PAGEFS_INTEGRATION=0: skipped"
	record "integration" 0 0 1 "PAGEFS_INTEGRATION=0"
elif ! compgen -G "tests/integration/test_*.py" >/dev/null; then
	section "integration tests"
	echo "test.sh: no tests/integration/test_*.py yet"
	record "integration" 0 0 1 "no test files"
elif [[ ! -c /dev/fuse ]]; then
	record "integration" 0 1 0 "no /dev/fuse"
else
	# The PostgreSQL tests (engine variants, several mounts) run once, in
	# the ASan pass (the plain pass needs its time for the rest); they run
	# in the plain pass only when the ASan build failed.
	for dir in build-asan build; do
		if [[ " ${BUILDS[*]} " == *" $dir "* ]]; then
			skip=""
			[[ $dir == build && " ${BUILDS[*]} " == *" build-asan "* ]] &&
				skip="the PostgreSQL tests ran in the ASan pass (scripts/test.sh)"
			run_integration "$dir" "$skip"
		fi
	done
fi

# ---- 4b. the package ----

if [[ ${PAGEFS_PACKAGE:-1} != 0 ]]; then
	section "package (cpack -G DEB, apt-get install, mount, remove)"
	if [[ " ${BUILDS[*]} " != *" build "* ]]; then
		record "package" 0 1 0 "build/ failed"
	elif run_step --show "$LIMIT_PACKAGE" "$WORK/package.log" bash scripts/package_test.sh build; then
		record "package" 1 0 0 "scripts/package_test.sh"
	else
		record "package" 0 1 0 "scripts/package_test.sh$( ((STEP_OVER)) &&
			echo " over its $LIMIT_PACKAGE s limit"): see $WORK/package.log"
	fi
fi

# ---- 4c. the nemesis: three nodes on one PostgreSQL index under faults ----

# scripts/nemesis.sh (docs/NEMESIS.md): its own PostgreSQL server (it
# restarts it), NEMESIS_SECONDS (PAGEFS_NEMESIS_SECONDS here, 60; 0 skips)
# of faults with every read checked, then umount and fsck. Against the ASan
# binary when there is one (its daemons' reports fail the run). About 90 s.
# PAGEFS_NEMESIS_FAULTS picks faults (NEMESIS_FAULTS: all of them). Its
# directory is under $WORK/nemesis (TMPDIR). Limit: the run plus 600 s; its
# own cleanup (nemesis.py's, then what it left ended) gets 150 s after
# SIGTERM.
NEMESIS_S=${PAGEFS_NEMESIS_SECONDS:-60}
NEMESIS_F=${PAGEFS_NEMESIS_FAULTS:-kill9,stop,pg_restart,pg_terminate,storm,http_burst}
if [[ $NEMESIS_S != 0 ]]; then
	section "nemesis (${NEMESIS_S} s)"
	nbin=""
	for dir in build-asan build; do
		[[ " ${BUILDS[*]} " == *" $dir "* ]] && nbin=$ROOT/$dir/pagefs && break
	done
	if [[ -z $nbin ]]; then
		record "nemesis" 0 1 0 "no build"
	elif [[ ! -c /dev/fuse ]]; then
		record "nemesis" 0 1 0 "no /dev/fuse"
	else
		mkdir -p "$WORK/nemesis"
		chmod 755 "$WORK/nemesis"
		NEMESIS_LIMIT=${PAGEFS_NEMESIS_LIMIT:-$((${NEMESIS_S%.*} + 600))}
		run_step --grace 150 "$NEMESIS_LIMIT" "$WORK/nemesis.log" \
			env PAGEFS_BIN="$nbin" NEMESIS_SECONDS="$NEMESIS_S" NEMESIS_FAULTS="$NEMESIS_F" \
			TMPDIR="$WORK/nemesis" bash scripts/nemesis.sh
		rc=$?
		sed -n '/==== nemesis summary ====/,$p' "$WORK/nemesis.log" | grep -v '^  20' | head -n 40
		line=$(grep -E '^faults injected|^reads checked' "$WORK/nemesis.log" | tr '\n' ';' |
			sed -e 's/ (total [0-9]*)//' -e 's/;$//')
		if ((rc == 0)); then
			record "nemesis" 1 0 0 "$line"
		else
			grep -E 'nemesis: |nemesis.sh: |test.sh: |ERROR' "$WORK/nemesis.log" | tail -n 20
			((STEP_OVER)) && line="over its $NEMESIS_LIMIT s limit" || line="rc $rc"
			record "nemesis" 0 1 0 "$line; log: $WORK/nemesis.log"
		fi
	fi
fi

# ---- 5. formatting, 6. clang-tidy ----

section "clang-format"
mapfile -t CFILES < <(find fs meta serve tools tests/unit -name '*.[ch]' 2>/dev/null | sort)
if ((${#CFILES[@]} == 0)); then
	record "clang-format" 0 0 1 "no files"
elif run_step "$LIMIT_FORMAT" "$WORK/format.log" clang-format --dry-run -Werror "${CFILES[@]}"; then
	echo "clang-format: ${#CFILES[@]} files clean"
	record "clang-format" 1 0 0 "${#CFILES[@]} files"
else
	bad=$(grep -oE '^[^: ]+\.[ch]:' "$WORK/format.log" | sort -u | tr -d ':' | tr '\n' ' ')
	head -n 40 "$WORK/format.log"
	echo "clang-format: not formatted: $bad"
	echo "clang-format: fix with: clang-format -i $bad"
	record "clang-format" 0 1 0 "fix: clang-format -i $bad"
fi

# clang-tidy (.clang-tidy) over the C files, with build/'s compile
# commands: by default when it is installed (about 2 minutes of CPU, one
# file per process, nproc at a time, each at most 300 s); PAGEFS_TIDY=0
# skips it, PAGEFS_TIDY=1 fails when it is missing.
TIDY=${PAGEFS_TIDY:-auto}
if [[ $TIDY != 0 ]]; then
	section "clang-tidy"
	if ! command -v clang-tidy >/dev/null; then
		if [[ $TIDY == 1 ]]; then
			record "clang-tidy" 0 1 0 "PAGEFS_TIDY=1 but clang-tidy is not installed"
		else
			echo "clang-tidy is not installed: skipped"
			record "clang-tidy" 0 0 1 "not installed"
		fi
	elif [[ " ${BUILDS[*]} " != *" build "* ]]; then
		echo "clang-tidy: no build/ (its compile commands): skipped"
		record "clang-tidy" 0 0 1 "build/ failed"
	else
		mapfile -t SRCS < <(find fs meta serve tools -name '*.c' | sort)
		mkdir -p "$WORK/tidy"
		printf '%s\n' "${SRCS[@]}" >"$WORK/tidy-files"
		# Each file's report in its own log (no interleaving), joined after.
		# shellcheck disable=SC2016 # $1 (the log directory), $2 (the file): the inner bash's
		run_step "$LIMIT_TIDY" "$WORK/tidy-xargs.log" \
			xargs -a "$WORK/tidy-files" -P "$(nproc 2>/dev/null || echo 2)" -n 1 \
			bash -c 'timeout -k 10 300 clang-tidy -p build --quiet "$2" >"$1/${2//\//_}.log" 2>&1' \
			tidy "$WORK/tidy"
		rc=$?
		cat "$WORK/tidy-xargs.log" "$WORK"/tidy/*.log >"$WORK/tidy.log" 2>/dev/null
		if ((rc == 0)) && ! grep -qE '(warning|error):' "$WORK/tidy.log"; then
			echo "clang-tidy: ${#SRCS[@]} files clean"
			record "clang-tidy" 1 0 0 "${#SRCS[@]} files"
		else
			grep -E -A3 '(warning|error):|test.sh: ' "$WORK/tidy.log" | head -n 80
			if ((STEP_OVER)); then
				record "clang-tidy" 0 1 0 "over its $LIMIT_TIDY s limit"
			elif ((rc != 0)) && ! grep -qE '(warning|error):' "$WORK/tidy.log"; then
				record "clang-tidy" 0 1 0 "xargs status $rc: clang-tidy failed or ran over 300 s on a file (logs: $WORK/tidy/)"
			else
				record "clang-tidy" 0 1 0 "see warnings above"
			fi
		fi
	fi
fi

# ---- 7. leftovers ----

# The steps are over: stop the private server, then nothing of the run may
# be left (a daemon, a mount, a server, a test helper).
section "leftovers"
pg_stop
rm -rf "$PG_DIR"
PG_DIR=""
if left=$(leftovers --kill 2>&1); then
	echo "test.sh: nothing left behind"
	record "leftovers" 1 0 0
else
	echo "$left"
	record "leftovers" 0 1 0 "$(grep -c 'left behind' <<<"$left") left behind and ended: see above"
fi

# ---- summary ----

DONE=1
print_summary
((FAILED == 0))
