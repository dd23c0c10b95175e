#!/usr/bin/env bash
# deps.sh - install what pagefs needs to build, test and run (Debian 12).
#
# Idempotent and silent when everything is present; otherwise runs
# apt-get update once and installs the missing packages. Needs root
# (or sudo) only when something is missing.
set -euo pipefail

PACKAGES=(
	gcc libc6-dev make cmake pkg-config
	libfuse3-dev fuse3 libsqlite3-dev libpq-dev libxxhash-dev libjansson-dev libyajl-dev libmicrohttpd-dev libcriterion-dev libsystemd-dev
	postgresql-15 postgresql-client-15
	python3 python3-pytest python3-requests
	python3-xxhash # python/pagefs: checksums on the direct read path (ctypes libxxhash otherwise)
	python3-numpy # tests/python: numpy buffers (the package works without it)
	python3-torch # tests/python/test_torch.py: torch tensors, bf16 and fp16 pages, HiCache host pools (the package works without it)
	python3-setuptools # pip install ./python (pyproject), tests/python/test_package.py
	clang-format clang-tidy
	attr gnuplot-nox
	faketime # test_http_protocol.py: a daemon on a clock the test moves
	clang valgrind # scripts/soak.sh: libFuzzer targets, valgrind memcheck
	prometheus # promtool check metrics, and a real server scraping a mount (test_metrics.py)
)

# One dpkg-query for all: "name ii " per installed package.
installed=" $(dpkg-query -W -f='${Package}:${db:Status-Abbrev} ' "${PACKAGES[@]}" 2>/dev/null || true)"
missing=()
for p in "${PACKAGES[@]}"; do
	[[ $installed == *" $p:ii "* ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo)
	else
		echo "deps.sh: missing packages: ${missing[*]}" >&2
		echo "deps.sh: run this script as root to install them" >&2
		exit 1
	fi
else
	SUDO=()
fi

echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt/dpkg run instead of failing on its lock.
APT_OPTS=(-q -o DPkg::Lock::Timeout=600)
"${SUDO[@]}" apt-get "${APT_OPTS[@]}" update >/dev/null
"${SUDO[@]}" apt-get "${APT_OPTS[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null
echo "deps.sh: done" >&2
