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
#   4b. the package (scripts/package_test.sh): cpack -G DEB from build/,
#      apt-get install ./pagefs_*.deb, pagefs --version, mount -t fuse.pagefs
#      from the installed files, apt-get remove (about 10 s; PAGEFS_PACKAGE=0
#      skips it)
#   4c. the nemesis (scripts/nemesis.sh, PAGEFS_NEMESIS_SECONDS=60; 0 skips;
#      PAGEFS_NEMESIS_FAULTS, every fault by default):
#      three nodes on one PostgreSQL index under faults, every read checked
#   5. clang-format --dry-run -Werror over fs/ meta/ serve/ tools/ tests/unit/
#   6. clang-tidy (.clang-tidy) over the .c files of fs/ meta/ serve/ tools/,
#      when clang-tidy is installed (PAGEFS_TIDY=0 skips it; PAGEFS_TIDY=1
#      fails when it is missing)
#
# Ends with "N passed, N failed, N skipped"; exits non-zero on any failure.
# Everything mounted under its temporary directory is unmounted and the
# PostgreSQL server stopped on exit, even when interrupted. Set PAGEFS_TEST_KEEP=1 to keep the logs.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

WORK=$(mktemp -d /tmp/pagefs-test.XXXXXX) || exit 1
PG_DIR="" # the private PostgreSQL server's directory, once started
PASSED=0
FAILED=0
SKIPPED=0
SUMMARY=()

# ---- never leave mounts behind ----

# Mount points under $WORK, deepest first (/proc/mounts escapes spaces as \040).
mounts_under() {
	local dev mp rest
	while read -r dev mp rest; do
		mp=$(printf '%b' "$mp")
		[[ $mp == "$WORK" || $mp == "$WORK"/* ]] && printf '%s\n' "$mp"
	done </proc/self/mounts | sort -r
}

unmount_all() {
	local mp bin
	for bin in "$ROOT/build/pagefs" "$ROOT/build-asan/pagefs" ""; do
		[[ -z $bin || -x $bin ]] && break
	done
	while IFS= read -r mp; do
		[[ -n $mp ]] || continue
		echo "test.sh: cleaning up mount $mp" >&2
		# pagefs umount also waits for the daemon to flush and exit.
		if [[ -n $bin ]] && timeout 70 "$bin" umount --timeout 60 "$mp" >/dev/null 2>&1; then
			continue
		fi
		umount -l "$mp" 2>/dev/null || fusermount3 -u -z "$mp" 2>/dev/null ||
			echo "test.sh: could not unmount $mp; unmount it by hand" >&2
	done < <(mounts_under)
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	unmount_all
	if [[ -n $PG_DIR ]]; then
		bash scripts/pg_test.sh stop "$PG_DIR"
		rm -rf "$PG_DIR"
	fi
	if [[ -n $(mounts_under) ]]; then
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
trap 'echo "test.sh: interrupted" >&2; exit 130' INT TERM

# ---- bookkeeping ----

section() {
	printf '\n==== %s ====\n' "$*"
}

# record NAME PASSED FAILED SKIPPED [DETAIL]
record() {
	PASSED=$((PASSED + $2))
	FAILED=$((FAILED + $3))
	SKIPPED=$((SKIPPED + $4))
	SUMMARY+=("$(printf '%-28s %4d passed, %4d failed, %4d skipped%s' "$1" "$2" "$3" "$4" \
		"${5:+   ($5)}")")
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
if ! bash scripts/deps.sh; then
	echo "test.sh: installing dependencies failed; run scripts/deps.sh as root" >&2
	exit 1
fi

section "PostgreSQL (private test server)"
# Its own directory, outside $WORK (mode 0700): as root the server runs as
# the postgres user, which must reach its socket and data directory.
PG_DIR=$(mktemp -d /tmp/pagefs-pg.XXXXXX) || exit 1
if PAGEFS_TEST_PG_URI=$(bash scripts/pg_test.sh start "$PG_DIR"); then
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

# ---- 2. builds ----

BUILDS=()
for variant in plain asan; do
	if [[ $variant == plain ]]; then
		dir=build san=""
	else
		dir=build-asan san=address,undefined
	fi
	section "build $dir${san:+ (SANITIZER=$san)}"
	if BUILD_DIR=$dir bash scripts/build.sh $san >"$WORK/build-$variant.log" 2>&1; then
		tail -n 1 "$WORK/build-$variant.log"
		record "build $dir" 1 0 0
		BUILDS+=("$dir")
	else
		tail -n 40 "$WORK/build-$variant.log"
		echo "test.sh: build of $dir failed (full log above)" >&2
		record "build $dir" 0 1 0
	fi
done

# ---- 3. unit tests ----

for dir in "${BUILDS[@]}"; do
	section "unit tests ($dir)"
	xml=$WORK/unit-$dir.xml
	log=$WORK/unit-$dir.log
	rm -f "$dir"/unit-results/*.xml
	ctest --test-dir "$dir" -L unit --output-on-failure --timeout 300 \
		--output-junit "$xml" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	line=$(grep -E 'tests passed|No tests were found' "$log" | tail -n 1)
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
	env PAGEFS_BIN="$bin" \
		PAGEFS_IT_PG_SKIP="$pg_skip" \
		TMPDIR="$WORK/tmp-$tag" \
		PAGEFS_IT_TMPDIR="$WORK/tmp-$tag" \
		XDG_STATE_HOME="$WORK/state-$tag" \
		ASAN_OPTIONS="detect_leaks=1" \
		UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
		timeout -k 30 900 /usr/bin/python3 -m pytest -q -rfEs --durations=5 -p no:cacheprovider \
		--basetemp="$WORK/pytest-$tag" --junitxml="$xml" tests/integration tests/python 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	((rc == 124)) && echo "test.sh: the integration suite timed out after 900 s" >&2
	# pytest's own summary ("3 failed, 40 passed in 12.3s"), with or without ===.
	line=$(grep -E '(passed|failed|error|skipped|deselected|no tests ran).* in [0-9.]+s' "$log" |
		tail -n 1 | sed -E 's/^=+ //; s/ =+$//')
	read -r p f s < <(junit_counts "$xml")
	# 5: no tests collected; anything else non-zero must show as a failure.
	if ((rc == 5)); then
		line="no integration tests collected"
	elif ((rc != 0 && f == 0)); then
		f=1
	fi
	record "integration ($dir)" "$p" "$f" "$s" "$line"
}

if ! compgen -G "tests/integration/test_*.py" >/dev/null; then
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
	elif bash scripts/package_test.sh build 2>&1 | tee "$WORK/package.log"; then
		record "package" 1 0 0 "scripts/package_test.sh"
	else
		record "package" 0 1 0 "scripts/package_test.sh: see $WORK/package.log"
	fi
fi

# ---- 4c. the nemesis: three nodes on one PostgreSQL index under faults ----

# scripts/nemesis.sh (docs/NEMESIS.md): its own PostgreSQL server (it
# restarts it), NEMESIS_SECONDS (PAGEFS_NEMESIS_SECONDS here, 60; 0 skips)
# of faults with every read checked, then umount and fsck. Against the ASan
# binary when there is one (its daemons' reports fail the run). About 90 s.
# PAGEFS_NEMESIS_FAULTS picks faults (NEMESIS_FAULTS: all of them).
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
		PAGEFS_BIN=$nbin NEMESIS_SECONDS=$NEMESIS_S NEMESIS_FAULTS=$NEMESIS_F \
			timeout $((NEMESIS_S + 600)) \
			bash scripts/nemesis.sh >"$WORK/nemesis.log" 2>&1
		rc=$?
		sed -n '/==== nemesis summary ====/,$p' "$WORK/nemesis.log" | grep -v '^  20' | head -n 40
		line=$(grep -E '^faults injected|^reads checked' "$WORK/nemesis.log" | tr '\n' ';' |
			sed -e 's/ (total [0-9]*)//' -e 's/;$//')
		if ((rc == 0)); then
			record "nemesis" 1 0 0 "$line"
		else
			grep -E 'nemesis: |ERROR' "$WORK/nemesis.log" | tail -n 20
			record "nemesis" 0 1 0 "rc $rc; log: $WORK/nemesis.log"
		fi
	fi
fi

# ---- 5. formatting, 6. clang-tidy ----

section "clang-format"
mapfile -t CFILES < <(find fs meta serve tools tests/unit -name '*.[ch]' 2>/dev/null | sort)
if ((${#CFILES[@]} == 0)); then
	record "clang-format" 0 0 1 "no files"
elif clang-format --dry-run -Werror "${CFILES[@]}" 2>"$WORK/format.log"; then
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
# file per process, nproc at a time); PAGEFS_TIDY=0 skips it, PAGEFS_TIDY=1
# fails when it is missing.
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
		# Each file's report in its own log (no interleaving), joined after.
		# shellcheck disable=SC2016 # $1 (the log directory), $2 (the file): the inner bash's
		printf '%s\n' "${SRCS[@]}" | xargs -P "$(nproc 2>/dev/null || echo 2)" -n 1 \
			bash -c 'clang-tidy -p build --quiet "$2" >"$1/${2//\//_}.log" 2>&1' tidy \
			"$WORK/tidy"
		rc=$?
		cat "$WORK"/tidy/*.log >"$WORK/tidy.log" 2>/dev/null
		if ((rc == 0)) && ! grep -qE '(warning|error):' "$WORK/tidy.log"; then
			echo "clang-tidy: ${#SRCS[@]} files clean"
			record "clang-tidy" 1 0 0 "${#SRCS[@]} files"
		else
			grep -E -A3 '(warning|error):' "$WORK/tidy.log" | head -n 80
			record "clang-tidy" 0 1 0 "see warnings above"
		fi
	fi
fi

# ---- summary ----

section "summary"
printf '%s\n' "${SUMMARY[@]}"
echo
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
((FAILED == 0))
