# proc_lib.sh - shell functions scripts/test.sh and scripts/nemesis.sh share
# (sourced, not run): whether a process is gone, and the mounts under a
# directory. Both read /proc only, so neither blocks on a stopped FUSE
# daemon.

# gone PID: PID has exited (gone, or a zombie its parent has not reaped).
gone() {
	local stat state
	read -r stat 2>/dev/null <"/proc/$1/stat" || return 0
	read -r state _ <<<"${stat##*) }"
	[[ $state == Z ]]
}

# mounts_under DIR: the mount points at or below DIR, deepest first
# (/proc/mounts escapes spaces as \040).
mounts_under() {
	local dev mp rest
	while read -r dev mp rest; do
		mp=$(printf '%b' "$mp")
		[[ $mp == "$1" || $mp == "$1"/* ]] && printf '%s\n' "$mp"
	done </proc/self/mounts | sort -r
}
