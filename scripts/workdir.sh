# workdir.sh - sourced by soak.sh and valgrind.sh: a temporary WORK
# directory that is always removed at exit, after unmounting whatever the
# run left mounted under it (lazily; a mount that stays keeps WORK).
# Set NAME (the caller's name for messages) before sourcing.
# PAGEFS_TEST_KEEP=1 keeps WORK for inspection.
WORK=$(mktemp -d "/tmp/pagefs-${NAME%.sh}.XXXXXX") || exit 1

cleanup() {
	local rc=$? dev mp rest
	trap - EXIT INT TERM
	while read -r dev mp rest; do
		mp=$(printf '%b' "$mp")
		if [[ $mp == "$WORK"/* ]]; then
			echo "$NAME: cleaning up mount $mp" >&2
			umount -l "$mp" 2>/dev/null || fusermount3 -u -z "$mp" 2>/dev/null
		fi
	done < <(sort -r -k2 /proc/self/mounts)
	if grep -q " $WORK/" /proc/self/mounts; then
		echo "$NAME: mounts remain under $WORK; not removing it" >&2
	elif [[ ${PAGEFS_TEST_KEEP:-0} != 1 ]]; then
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
