#!/usr/bin/env bash
# pg_test.sh - a private PostgreSQL server for the tests, in a directory.
#
#   scripts/pg_test.sh start DIR   -> prints the URI of database pagefs_test
#   scripts/pg_test.sh stop DIR
#
# The cluster lives in DIR/data and listens only on a Unix socket in DIR
# (no TCP port, nothing shared with other servers on the machine). The
# server runs as the invoking user, or as `postgres` when invoked as root
# (PostgreSQL refuses to run as root). fsync is off: these servers hold
# test data only; pagefs's own durability settings are unaffected. Every
# command is bounded (initdb 120 s, pg_ctl 60 s, createdb 60 s): with the
# server's output in DIR/server.log, start returns once it is ready.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [[ -z $cmd || -z $dir ]]; then
	echo "usage: pg_test.sh start|stop DIR" >&2
	exit 2
fi
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [[ -z $bindir ]]; then
	echo "pg_test.sh: no PostgreSQL server found (apt-get install postgresql-15)" >&2
	exit 1
fi

as_owner() {
	if [[ $(id -u) -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

case $cmd in
start)
	mkdir -p "$dir"
	[[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
	as_owner timeout -k 10 120 "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 \
		--no-sync >"$dir/initdb.log" 2>&1 ||
		{
			cat "$dir/initdb.log" >&2
			exit 1
		}
	as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
		-o "-c listen_addresses='' -c unix_socket_directories='$dir' -c fsync=off \
-c full_page_writes=off -c max_connections=300 -c shared_buffers=32MB" start >/dev/null ||
		{
			tail -n 20 "$dir/server.log" >&2
			exit 1
		}
	as_owner timeout -k 10 60 "$bindir/createdb" -h "$dir" -U postgres pagefs_test
	echo "postgresql:///pagefs_test?host=$dir&user=postgres"
	;;
stop)
	[[ -d $dir/data ]] || exit 0
	as_owner "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 60 stop >/dev/null 2>&1 || true
	;;
*)
	echo "pg_test.sh: unknown command '$cmd': use start or stop" >&2
	exit 2
	;;
esac
