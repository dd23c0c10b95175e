#!/usr/bin/env bash
# build.sh [SANITIZER] - configure and build pagefs with CMake.
#
#   scripts/build.sh                    -> build/pagefs
#   scripts/build.sh address,undefined  -> build-asan/pagefs
#   scripts/build.sh thread             -> build-tsan/pagefs
#
# BUILD_DIR overrides the directory; extra CMake arguments go in CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitizer=${1:-}
case "$sanitizer" in
"") dir=build ;;
address | undefined | address,undefined | undefined,address) dir=build-asan ;;
thread) dir=build-tsan ;;
*)
	echo "build.sh: unknown sanitizer '$sanitizer': use address, undefined, address,undefined or thread" >&2
	exit 2
	;;
esac
dir=${BUILD_DIR:-$dir}
jobs=$(nproc 2>/dev/null || echo 2)

# shellcheck disable=SC2086 # CMAKE_ARGS is a list of words
cmake -S . -B "$dir" -DSANITIZER="$sanitizer" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$dir" -j "$jobs"
echo "build.sh: built $dir/pagefs${sanitizer:+ (sanitizer $sanitizer)}"
