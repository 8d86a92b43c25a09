#!/bin/sh
# A throwaway PostgreSQL server for the storage tests (never for real data: fsync is off).
#
#   export CTXGATE_TEST_PG_URL="$(scripts/pg-test-server.sh)"   # start; prints the URL only
#   scripts/pg-test-server.sh stop                              # stop and delete the data
#
# Uses the binaries of Debian's `postgresql` package (apt-get install -y postgresql), listens
# on 127.0.0.1:54329 only, trust auth, database ctxgate_test. PostgreSQL refuses to run as
# root, so as root the server runs as the `postgres` user (created if missing).
set -eu

PORT="${CTXGATE_PG_PORT:-54329}"
DATA="${CTXGATE_PG_DIR:-${TMPDIR:-/tmp}/ctxgate-pg-test}"
DB=ctxgate_test
URL="postgresql+asyncpg://postgres@127.0.0.1:${PORT}/${DB}"

say() { echo "pg-test-server: $*" >&2; }

find_bindir() {
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [ -x "$dir/initdb" ] && { echo "$dir"; return; }
    done
    if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
        pg_config --bindir
        return
    fi
    initdb_path="$(command -v initdb 2>/dev/null || true)"
    [ -n "$initdb_path" ] && { dirname "$initdb_path"; return; }
    say "no PostgreSQL binaries found; install them with: apt-get install -y postgresql"
    exit 1
}

# Run a command as the user that owns the cluster.
as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        if command -v runuser >/dev/null 2>&1; then
            runuser -u postgres -- "$@"
        else
            su postgres -s /bin/sh -c '"$0" "$@"' -- "$@"
        fi
    else
        "$@"
    fi
}

ensure_owner() {
    [ "$(id -u)" -eq 0 ] || return 0
    id postgres >/dev/null 2>&1 && return 0
    say "creating system user postgres"
    useradd --system --user-group --no-create-home --shell /usr/sbin/nologin postgres
}

is_running() {
    [ -f "$DATA/PG_VERSION" ] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

start() {
    ensure_owner
    if is_running; then
        say "already running in $DATA"
        echo "$URL"
        return
    fi
    rm -rf "$DATA"
    mkdir -p "$DATA"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$DATA"
    chmod 700 "$DATA"
    as_owner "$BIN/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --no-locale \
        >"$DATA.initdb.log" 2>&1 || { cat "$DATA.initdb.log" >&2; exit 1; }
    # The Unix socket goes into the data directory: /var/run/postgresql may not exist.
    as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 start -o \
        "-c listen_addresses=127.0.0.1 -p $PORT -k $DATA -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
        >&2 || { cat "$DATA/server.log" >&2; exit 1; }
    as_owner "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DB"
    say "started PostgreSQL $("$BIN/postgres" --version | awk '{print $3}') in $DATA"
    echo "$URL"
}

stop() {
    if is_running; then
        as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >&2
    fi
    rm -rf "$DATA" "$DATA.initdb.log"
    say "stopped"
}

BIN="$(find_bindir)"
case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    *) say "usage: $0 [start|stop]"; exit 2 ;;
esac
