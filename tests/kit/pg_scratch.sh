#!/usr/bin/env bash
#  A scratch PostgreSQL server for tests, in a directory of its own.
#
#    pg_scratch.sh start DIR     initialize a cluster in DIR (the first time),
#                                start it on a free loopback port, create the
#                                database dsh, and print its URI:
#                                postgresql://postgres@127.0.0.1:PORT/dsh
#    pg_scratch.sh stop DIR      stop it (fast: open sessions are ended)
#    pg_scratch.sh restart DIR   stop it and start it again on the same port
#                                (for tests of a server that comes back)
#
#  Trust authentication, TCP on 127.0.0.1 only (and a Unix socket in DIR),
#  no fsync: for tests, never for data. PostgreSQL will not run as root, so
#  as root its programs run as nobody, in a DIR given to nobody; DIR's
#  parents must be searchable by nobody (a mktemp -d under /tmp is). Exits
#  77, meson's skip, when there are no PostgreSQL server programs here.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 start|stop|restart DIR" >&2
    exit 2
fi
command="$1"
dir="$2"
superuser=postgres

#  The server programs: pg_config's, else the newest under /usr/lib/postgresql
bindir=""
if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
    bindir=$(pg_config --bindir)
else
    for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V); do
        [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ] && bindir="$candidate"
    done
fi
if [ -z "$bindir" ]; then
    echo "pg_scratch: no PostgreSQL server here (no initdb in pg_config --bindir or /usr/lib/postgresql/*/bin)" >&2
    exit 77
fi

#  Runs a server program, as nobody when we are root, from DIR (a working
#  directory nobody may not be able to enter would make it complain)
as_server () {
    if [ "$(id -u)" -ne 0 ]; then
        (cd "$dir" && "$@")
    elif command -v runuser >/dev/null 2>&1; then
        (cd "$dir" && runuser -u nobody -- "$@")
    else
        (cd "$dir" && setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups -- "$@")
    fi
}

free_port () {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start () {
    mkdir -p "$dir"
    [ "$(id -u)" -ne 0 ] || chown nobody "$dir"
    chmod 755 "$dir"
    if ! as_server test -w "$dir"; then
        echo "pg_scratch: the server's user cannot write in $dir (are its parents searchable?)" >&2
        exit 1
    fi
    local fresh=0
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        if ! as_server "$bindir/initdb" -D "$dir/data" -U "$superuser" -A trust -E UTF8 --locale=C --no-sync \
                >"$dir/initdb.log" 2>&1; then
            cat "$dir/initdb.log" >&2
            exit 1
        fi
        printf 'local all all trust\nhost all all 127.0.0.1/32 trust\n' >"$dir/data/pg_hba.conf"
        cat >>"$dir/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
        fresh=1
    fi
    #  A first start takes a port that was free a moment ago, and another
    #  if someone took it meanwhile; a restart keeps its port
    local attempts=1
    [ -f "$dir/port" ] || { free_port >"$dir/port"; attempts=3; }
    while :; do
        port=$(cat "$dir/port")
        if as_server "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -o "-p $port" -w -t 30 start \
                >/dev/null; then
            break
        fi
        attempts=$((attempts - 1))
        if [ "$attempts" -eq 0 ]; then
            echo "pg_scratch: the server in $dir did not start on port $port:" >&2
            tail -n 20 "$dir/server.log" >&2
            exit 1
        fi
        free_port >"$dir/port"
    done
    if [ "$fresh" = 1 ]; then
        as_server "$bindir/createdb" -h 127.0.0.1 -p "$port" -U "$superuser" dsh
    fi
    echo "postgresql://$superuser@127.0.0.1:$port/dsh"
}

stop () {
    [ -f "$dir/data/postmaster.pid" ] || return 0
    as_server "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null
}

case "$command" in
    start) start ;;
    stop) stop ;;
    restart) stop; start ;;
    *) echo "usage: $0 start|stop|restart DIR" >&2; exit 2 ;;
esac
