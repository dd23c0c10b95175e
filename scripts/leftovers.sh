#!/usr/bin/env bash
# leftovers.sh - the processes and mounts a test run left behind, found by
# the run's own paths (never by a program's name), and with --kill ended.
#
#   scripts/leftovers.sh [--kill] [--as NAME] [--bin DIR]... DIR...
#
# A process is the run's when its command line names one of the DIRs (the
# run's temporary directories: a pagefs daemon's mount point, a PostgreSQL
# server's -D, a test helper's files), or its TMPDIR (inherited from the
# run), executable, working directory, stdout or stderr (a step's log) lies
# under one of them, or its executable under a --bin DIR (the build
# directories: daemons, unit tests), or its parent is the run's (a
# PostgreSQL server's backends). Mounts under the DIRs are the run's too.
# This script and its callers are never counted.
#
# Prints one line per leftover: "NAME: left behind: PID CMD" and "NAME: left
# behind: mount MOUNTPOINT" (NAME: --as, default leftovers.sh). With --kill:
# SIGCONT to every leftover process (a daemon under SIGSTOP), abort the FUSE
# connection of every leftover mount (fusectl: a request of a wedged daemon
# fails instead of waiting forever, so its callers in D state can die),
# SIGKILL, then lazy unmounts (umount -l, deepest first). Reads only /proc
# and /sys, never a path inside a mount, so it cannot block on a stopped
# or wedged FUSE daemon; bounded by `timeout -k` where it runs a program.
#
# Exit 0 when nothing was left, 1 when something was.
set -uo pipefail

KILL=0
NAME=leftovers.sh
DIRS=()
BINS=()
while (($#)); do
	case $1 in
	--kill) KILL=1 ;;
	--as)
		NAME=$2
		shift
		;;
	--bin)
		BINS+=("${2%/}")
		shift
		;;
	-*)
		echo "leftovers.sh: unknown option '$1'" >&2
		exit 2
		;;
	*) DIRS+=("${1%/}") ;;
	esac
	shift
done
((${#DIRS[@]} + ${#BINS[@]})) || {
	echo "usage: leftovers.sh [--kill] [--as NAME] [--bin DIR]... DIR..." >&2
	exit 2
}

under() { # PATH DIR... : PATH is one of the DIRs or below one
	local p=$1 d
	shift
	for d in "$@"; do
		[[ -n $d && ($p == "$d" || $p == "$d"/*) ]] && return 0
	done
	return 1
}

# This script and its ancestors (the caller, test.sh, .ci/run) are not leftovers.
declare -A SELF=()
pid=$BASHPID
while [[ -n $pid && $pid != 0 && -z ${SELF[$pid]:-} ]]; do
	SELF[$pid]=1
	read -r stat 2>/dev/null <"/proc/$pid/stat" || break
	read -r _ pid _ <<<"${stat##*) }"
done

# Every process's executable, working directory, stdout and stderr, in
# one pass (one find, not a readlink per process: fast on a loaded machine).
declare -A EXE=() LINKS=()
while IFS=$'\t' read -r path target; do
	pid=${path#/proc/}
	pid=${pid%%/*}
	target=${target% (deleted)}
	if [[ $path == */exe ]]; then
		EXE[$pid]=$target
	else
		LINKS[$pid]+=$target$'\n'
	fi
done < <(find /proc/[0-9]*/exe /proc/[0-9]*/cwd /proc/[0-9]*/fd/1 /proc/[0-9]*/fd/2 \
	-maxdepth 0 -printf '%p\t%l\n' 2>/dev/null)

# Every process: its parent, and whether it is the run's itself.
declare -A PARENT=() MINE=() CMD=()
for proc in /proc/[0-9]*; do
	pid=${proc#/proc/}
	[[ -n ${SELF[$pid]:-} ]] && continue
	read -r stat 2>/dev/null <"$proc/stat" || continue
	read -r state ppid _ <<<"${stat##*) }"
	[[ $state == Z ]] && continue # gone already: its parent reaps it
	[[ $ppid == "$BASHPID" ]] && continue # this script's own subshells
	args=()
	mapfile -d '' args 2>/dev/null <"$proc/cmdline" || continue
	((${#args[@]})) || continue # a kernel thread
	PARENT[$pid]=$ppid
	CMD[$pid]=${args[*]}
	mine=0
	for d in "${DIRS[@]}"; do
		[[ ${CMD[$pid]} == *"$d"* ]] && mine=1 && break
	done
	if ((!mine)); then
		env=()
		mapfile -d '' env 2>/dev/null <"$proc/environ"
		for e in "${env[@]}"; do
			[[ $e == TMPDIR=* ]] && under "${e#TMPDIR=}" "${DIRS[@]}" && mine=1 && break
		done
	fi
	if ((!mine)); then
		under "${EXE[$pid]:-}" "${DIRS[@]}" "${BINS[@]}" && mine=1
	fi
	if ((!mine)); then
		while IFS= read -r link; do
			under "$link" "${DIRS[@]}" && mine=1 && break
		done <<<"${LINKS[$pid]:-}"
	fi
	((mine)) && MINE[$pid]=1
done
# ... and their descendants.
changed=1
while ((changed)); do
	changed=0
	for pid in "${!PARENT[@]}"; do
		if [[ -z ${MINE[$pid]:-} && -n ${MINE[${PARENT[$pid]}]:-} ]]; then
			MINE[$pid]=1
			changed=1
		fi
	done
done

# Mounts under the DIRs, deepest first, with their device (fusectl's name).
declare -A DEV=()
MOUNTS=()
while read -r _ _ dev _ mp _; do
	printf -v mp '%b' "$mp" # /proc escapes spaces as \040
	under "$mp" "${DIRS[@]}" || continue
	DEV[$mp]=$dev
	MOUNTS+=("$mp")
done </proc/self/mountinfo
mapfile -t MOUNTS < <(printf '%s\n' "${MOUNTS[@]}" | sort -r | sed '/^$/d')

PIDS=("${!MINE[@]}")
((${#PIDS[@]} + ${#MOUNTS[@]})) || exit 0

for pid in $(printf '%s\n' "${PIDS[@]}" | sort -n); do
	echo "$NAME: left behind: $pid ${CMD[$pid]:0:300}"
done
for mp in "${MOUNTS[@]}"; do
	echo "$NAME: left behind: mount $mp"
done
((KILL)) || exit 1

for pid in "${PIDS[@]}"; do
	kill -CONT "$pid" 2>/dev/null
done
if ((${#MOUNTS[@]})); then
	fusectl=/sys/fs/fuse/connections
	if [[ -d $fusectl ]] && ! grep -qs " $fusectl fusectl " /proc/self/mounts; then
		timeout -k 5 20 mount -t fusectl none "$fusectl" 2>/dev/null
	fi
	for mp in "${MOUNTS[@]}"; do
		minor=${DEV[$mp]#*:}
		[[ -w $fusectl/$minor/abort ]] && echo 1 >"$fusectl/$minor/abort" 2>/dev/null
	done
fi
for pid in "${PIDS[@]}"; do
	kill -KILL "$pid" 2>/dev/null
done
# Wait (10 s at most) until they are gone or zombies for their parents to reap.
for _ in $(seq 50); do
	alive=0
	for pid in "${PIDS[@]}"; do
		read -r stat 2>/dev/null <"/proc/$pid/stat" || continue
		read -r state _ <<<"${stat##*) }"
		[[ $state != Z ]] && alive=1 && break
	done
	((alive)) || break
	sleep 0.2
done
for pid in "${PIDS[@]}"; do
	read -r stat 2>/dev/null <"/proc/$pid/stat" || continue
	read -r state _ <<<"${stat##*) }"
	[[ $state != Z ]] && echo "$NAME: still alive after SIGKILL (state $state): $pid ${CMD[$pid]:0:200}"
done
mounted() { # MP: still in the mount table (an unmount in progress may end first)
	local mp rest
	while read -r _ mp rest; do
		printf -v mp '%b' "$mp"
		[[ $mp == "$1" ]] && return 0
	done </proc/self/mounts
	return 1
}
for mp in "${MOUNTS[@]}"; do
	timeout -k 5 20 umount -l "$mp" 2>/dev/null ||
		timeout -k 5 20 fusermount3 -u -z "$mp" 2>/dev/null ||
		! mounted "$mp" ||
		echo "$NAME: could not unmount $mp; unmount it by hand"
done
exit 1
