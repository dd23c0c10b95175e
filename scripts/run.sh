#!/usr/bin/env bash
# run.sh [MOUNTPOINT] - install dependencies, build, and mount a local pagefs.
#
#   sudo scripts/run.sh              # mounts at /mnt/pagefs
#   sudo scripts/run.sh /mnt/kv      # or anywhere else
#
# The backing directory (where the pools' data files live) is
# /var/tmp/pagefs-backing, or $PAGEFS_BACKING; the daemon logs to
# /var/tmp/pagefs.log (next to the backing directory), or $PAGEFS_LOG.
# Extra mount options go in $PAGEFS_MOUNT_OPTS (e.g. "--page-size 64K").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

MOUNTPOINT=$(realpath -m "${1:-/mnt/pagefs}")
BACKING=${PAGEFS_BACKING:-/var/tmp/pagefs-backing}
LOG=${PAGEFS_LOG:-$(dirname "$BACKING")/pagefs.log}
BIN=$ROOT/build/pagefs

if [[ $# -gt 1 ]]; then
	echo "usage: scripts/run.sh [MOUNTPOINT]" >&2
	exit 2
fi

bash scripts/deps.sh
if [[ ! -c /dev/fuse ]]; then
	echo "run.sh: /dev/fuse is missing: load the fuse module (modprobe fuse), or in a container add --device /dev/fuse --cap-add SYS_ADMIN" >&2
	exit 1
fi
bash scripts/build.sh >/dev/null

if grep -qs " $MOUNTPOINT fuse.pagefs " /proc/self/mounts; then
	echo "run.sh: $MOUNTPOINT is already a pagefs mount:"
	"$BIN" status "$MOUNTPOINT" || true
	echo "run.sh: to start over: $BIN umount $MOUNTPOINT && scripts/run.sh $MOUNTPOINT"
	exit 0
fi

if ! mkdir -p "$BACKING" "$MOUNTPOINT"; then
	echo "run.sh: cannot create $BACKING and $MOUNTPOINT: run as root (sudo scripts/run.sh), or set PAGEFS_BACKING and name a MOUNTPOINT you own" >&2
	exit 1
fi
# shellcheck disable=SC2086 # PAGEFS_MOUNT_OPTS is a list of words
"$BIN" mount "$BACKING" "$MOUNTPOINT" --log-file "$LOG" ${PAGEFS_MOUNT_OPTS:-}

cat <<EOF

pagefs is mounted on $MOUNTPOINT (data files in $BACKING, log in $LOG).
The command is $BIN; to call it as 'pagefs':  export PATH=$ROOT/build:\$PATH

Try:
  mkdir -p $MOUNTPOINT/0/kv                       # rank 0, pool "kv"
  cp /etc/os-release $MOUNTPOINT/0/kv/page0       # one page, committed at close
  ls -l $MOUNTPOINT/0/kv
  getfattr -d $MOUNTPOINT/0/kv/page0              # slot, checksum, data file, offset
  getfattr -n user.pagefs.stats --only-values $MOUNTPOINT
  df -h $MOUNTPOINT
  pagefs pool create $MOUNTPOINT/0/mamba --page-size 64K --capacity 1G
  pagefs status $MOUNTPOINT
  pagefs umount $MOUNTPOINT                       # flush and unmount
EOF
