#!/usr/bin/env bash
# package_test.sh [BUILD_DIR] - builds the .deb with cpack, installs it with
# apt-get install ./pagefs_*.deb, and checks the installed files: pagefs
# --version, `mount -t fuse.pagefs` through the installed helper (a page
# written and read, /metrics scraped), umount(8), the man pages and the
# units (systemd-analyze verify); then removes the package again.
# scripts/test.sh runs it as its own step. Needs root; refuses to run when
# a pagefs package is installed already (it would replace it). Works in a
# directory under $TMPDIR (or /tmp); scripts/test.sh bounds its time.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
APT=(apt-get -q -y -o DPkg::Lock::Timeout=600)

if dpkg-query -W -f='${Status}' pagefs 2>/dev/null | grep -q 'install ok installed'; then
	echo "package_test: a pagefs package is installed already; remove it first (apt-get remove pagefs)" >&2
	exit 1
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pagefs-pkg.XXXXXX")
INSTALLED=0
cleanup() {
	local rc=$?
	if grep -qs " $WORK/m " /proc/mounts; then
		timeout -k 5 30 umount "$WORK/m" 2>/dev/null || timeout -k 5 30 umount -l "$WORK/m" 2>/dev/null || true
	fi
	if ((INSTALLED)); then
		DEBIAN_FRONTEND=noninteractive timeout -k 10 700 "${APT[@]}" remove pagefs >/dev/null 2>&1 || true
	fi
	grep -qs " $WORK/" /proc/mounts || rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT

step() { printf 'package_test: %s\n' "$*"; }
fail() {
	printf 'package_test: FAILED: %s\n' "$*" >&2
	exit 1
}

step "cpack -G DEB in $BUILD"
rm -f "$BUILD"/pagefs_*.deb
(cd "$BUILD" && cpack -G DEB >"$WORK/cpack.log" 2>&1) || {
	cat "$WORK/cpack.log"
	fail "cpack"
}
cp "$BUILD"/pagefs_*.deb "$WORK/"
deb=$(ls "$WORK"/pagefs_*.deb)
dpkg-deb -f "$deb" Depends | grep -q libfuse3 || fail "the package does not depend on libfuse3 (shlibdeps)"

step "apt-get install ./$(basename "$deb")"
INSTALLED=1
(cd "$WORK" && DEBIAN_FRONTEND=noninteractive "${APT[@]}" install "./$(basename "$deb")" >"$WORK/apt.log" 2>&1) || {
	cat "$WORK/apt.log"
	fail "apt-get install"
}

step "pagefs --version"
[[ $(/usr/bin/pagefs --version) == "pagefs $(dpkg-deb -f "$deb" Version)" ]] || fail "pagefs --version says '$(/usr/bin/pagefs --version)'"
[[ $(readlink /usr/sbin/mount.fuse.pagefs) == ../bin/pagefs ]] || fail "no /usr/sbin/mount.fuse.pagefs link"

step "mount -t fuse.pagefs through the installed helper"
mkdir -p "$WORK/b" "$WORK/m"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mount -t fuse.pagefs "pagefs:$WORK/b" "$WORK/m" \
	-o "meta=sqlite:$WORK/index.db,page_size=64K,capacity=1M,metrics=$port,log_file=$WORK/log,nofail,_netdev" ||
	fail "mount -t fuse.pagefs"
grep -qs " $WORK/m fuse.pagefs " /proc/mounts || fail "not mounted"
mkdir -p "$WORK/m/0/kv"
printf 'installed' >"$WORK/m/0/kv/page"
[[ $(cat "$WORK/m/0/kv/page") == installed ]] || fail "page read back differs"
/usr/bin/python3 - "$port" <<'PY' || fail "/metrics of the installed daemon"
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=30).read().decode()
assert 'pagefs_pool_pages{rank="0",namespace="kv"} 1' in text, text[:2000]
PY
umount "$WORK/m" || fail "umount"
for _ in $(seq 100); do
	pgrep -f "pagefs mount .*$WORK/m" >/dev/null || break
	sleep 0.1
done
grep -qs " $WORK/m " /proc/mounts && fail "still mounted after umount"

step "man pages and units"
for page in pagefs pagefs-mount mount.fuse.pagefs pagefs-serve-meta; do
	[[ $(man -w "$page") == /usr/share/man/man8/$page.8* ]] || fail "man -w $page"
done
out=$(systemd-analyze verify pagefs@pkgtest.service pagefs-meta@pkgtest.service 2>&1) || fail "systemd-analyze verify: $out"
[[ -z $out ]] || fail "systemd-analyze verify: $out"

step "apt-get remove pagefs"
DEBIAN_FRONTEND=noninteractive "${APT[@]}" remove pagefs >"$WORK/apt.log" 2>&1 || {
	cat "$WORK/apt.log"
	fail "apt-get remove"
}
INSTALLED=0
[[ ! -e /usr/bin/pagefs && ! -L /usr/sbin/mount.fuse.pagefs && ! -e /usr/lib/systemd/system/pagefs@.service ]] ||
	fail "files left after apt-get remove"
step "ok"
