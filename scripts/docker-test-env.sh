#!/bin/sh
# A Docker daemon and a Python base image made from Debian's packages, for building ctxgate's
# image where Docker Hub is out of reach (CI, air-gapped hosts). Used by tests/deploy/test_docker.py and
# tests/deploy/test_balancer.py (which also builds deploy/haproxy on that base).
#
#   export CTXGATE_DOCKER_HOST="$(scripts/docker-test-env.sh)"   # start; prints DOCKER_HOST only
#   scripts/docker-test-env.sh stop                                # stop the daemon (data kept)
#   scripts/docker-test-env.sh purge                               # stop, delete images and data
#
# As root, on Debian: installs `docker.io` and `debootstrap` if missing, starts Debian's dockerd
# (20.10) on its own socket and data root, without iptables or a bridge (containers use the host
# network), with the overlay2 storage driver where it works, else vfs.
# The base image $CTXGATE_DOCKER_BASE (ctxgate-base:bookworm) is built once and kept:
# debootstrap --variant=minbase with python3 + python3-venv, a virtualenv at /opt/python first on
# PATH (so `python` and `pip` behave as in python:3.11-slim), this machine's CA bundle (pip must
# reach the package index through whatever TLS proxy this machine trusts). Then:
#   DOCKER_HOST=... /usr/bin/docker build --network host \
#       --build-arg BASE_IMAGE=ctxgate-base:bookworm -t ctxgate:local .
# Exits non-zero, saying why on stderr, when the daemon cannot start.
set -eu

DIR="${CTXGATE_DOCKER_DIR:-/var/lib/ctxgate-docker}"
RUN="${CTXGATE_DOCKER_RUN:-/run/ctxgate-docker}"
BASE="${CTXGATE_DOCKER_BASE:-ctxgate-base:bookworm}"
SUITE="${CTXGATE_DOCKER_SUITE:-bookworm}"
MIRROR="${CTXGATE_DOCKER_MIRROR:-http://deb.debian.org/debian}"
CA_BUNDLE="${CTXGATE_DOCKER_CA:-/etc/ssl/certs/ca-certificates.crt}"
# auto: overlay2 where this kernel mounts an overlay on the data directory, else vfs (slower:
# every layer is a full copy, but it works on any filesystem, inside another container too).
STORAGE="${CTXGATE_DOCKER_STORAGE:-auto}"
SOCK="$RUN/docker.sock"
PIDFILE="$RUN/dockerd.pid"
LOG="$DIR/dockerd.log"
# Debian's client (20.10, BuildKit built in); a newer CLI earlier on PATH wants a buildx plugin.
DOCKER=/usr/bin/docker
export DOCKER_HOST="unix://$SOCK" DOCKER_BUILDKIT=1

say() { echo "docker-test-env: $*" >&2; }
fail() { say "$*"; exit 1; }

install_packages() {
    missing=""
    [ -x /usr/sbin/dockerd ] && [ -x "$DOCKER" ] || missing="docker.io"
    command -v debootstrap >/dev/null 2>&1 || missing="$missing debootstrap"
    [ -n "$missing" ] || return 0
    command -v apt-get >/dev/null 2>&1 || fail "no apt-get to install$missing"
    say "installing$missing (Debian packages)"
    apt-get update -qq >&2 || fail "apt-get update failed"
    # shellcheck disable=SC2086  # the list is meant to split
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o DPkg::Lock::Timeout=300 $missing >&2 \
        || fail "apt-get install$missing failed"
}

# Whatever is still mounted below $1 (deepest first): the daemon's network namespace, or the
# /proc a failed debootstrap left in its target.
unmount_below() {
    for target in $(awk -v top="$1/" 'index($5, top) == 1 { print $5 }' /proc/self/mountinfo \
        | sort -r); do
        umount "$target" || true
    done
}

# A daemon that exited leaves its data root bind-mounted and its network namespace mounted.
unmount_leftovers() {
    unmount_below "$RUN"
    unmount_below "$DIR"
}

pid_alive() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

answers() { "$DOCKER" version >/dev/null 2>&1; }

overlay_mounts() {
    probe="$DIR/overlay-probe"
    mkdir -p "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
    ok=1
    if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
        "$probe/merged" 2>/dev/null; then
        umount "$probe/merged"
        ok=0
    fi
    rm -rf "$probe"
    return "$ok"
}

pick_storage() {
    [ "$STORAGE" = auto ] || return 0
    if overlay_mounts; then STORAGE=overlay2; else STORAGE=vfs; fi
}

start_daemon() {
    if pid_alive && answers; then
        say "dockerd already running on $SOCK"
        return
    fi
    mkdir -p "$DIR" "$RUN"
    rm -f "$SOCK" "$PIDFILE"
    pick_storage
    say "starting dockerd on $SOCK ($STORAGE storage, data in $DIR, log $LOG)"
    # setsid: the daemon outlives this script and is not in its caller's process group.
    setsid /usr/sbin/dockerd --host "$DOCKER_HOST" --data-root "$DIR/data" --exec-root "$RUN/exec" \
        --pidfile "$PIDFILE" --iptables=false --ip6tables=false --bridge=none \
        --storage-driver="$STORAGE" >"$LOG" 2>&1 </dev/null &
    daemon=$!
    waited=0
    until answers; do
        if ! kill -0 "$daemon" 2>/dev/null; then
            tail -n 20 "$LOG" >&2
            unmount_leftovers
            fail "dockerd exited (log above)"
        fi
        [ "$waited" -lt 60 ] || { tail -n 20 "$LOG" >&2; kill "$daemon"; fail "dockerd silent 60 s"; }
        sleep 1
        waited=$((waited + 1))
    done
    say "dockerd $("$DOCKER" version --format '{{.Server.Version}}') up after ${waited}s"
}

build_base() {
    if "$DOCKER" image inspect "$BASE" >/dev/null 2>&1; then
        say "base image $BASE cached"
        return
    fi
    [ -r "$CA_BUNDLE" ] || fail "no CA bundle at $CA_BUNDLE (set CTXGATE_DOCKER_CA)"
    root="$DIR/rootfs"
    unmount_below "$root"
    rm -rf --one-file-system "$root"
    say "debootstrap $SUITE (minbase, python3, python3-venv) from $MIRROR"
    debootstrap --variant=minbase --include=python3,python3-venv "$SUITE" "$root" "$MIRROR" \
        >"$DIR/debootstrap.log" 2>&1 \
        || { tail -n 20 "$DIR/debootstrap.log" >&2; fail "debootstrap failed (log above)"; }
    mkdir -p "$root/etc/ssl/certs"
    cp "$CA_BUNDLE" "$root/etc/ssl/certs/ca-certificates.crt"
    # pip and setuptools come from Debian's bundled wheels (ensurepip): no network needed here.
    chroot "$root" /usr/bin/python3 -m venv /opt/python >&2
    # Only what an image needs: no apt lists, caches or docs.
    rm -rf "$root/var/lib/apt/lists"/* "$root/var/cache/apt"/*.bin "$root/usr/share/doc" \
        "$root/usr/share/man" "$root/usr/share/locale"
    tar -C "$root" -c . | "$DOCKER" import \
        --change 'ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
        --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
        --change 'CMD ["python3"]' \
        - "$BASE" >/dev/null
    rm -rf --one-file-system "$root"
    say "base image $BASE built ($("$DOCKER" run --rm --network host "$BASE" python --version))"
}

# A daemon that answers but cannot start a container is no use to the tests.
check_runs() {
    "$DOCKER" run --rm --network host "$BASE" python -c 'print("ok")' >/dev/null 2>&1 \
        || fail "dockerd is up but cannot run a container (log: $LOG)"
}

stop_daemon() {
    if pid_alive; then
        pid="$(cat "$PIDFILE")"
        kill "$pid"
        waited=0
        while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 30 ]; do
            sleep 1
            waited=$((waited + 1))
        done
        kill -0 "$pid" 2>/dev/null && fail "dockerd (pid $pid) did not stop in 30 s"
        say "dockerd stopped"
    else
        say "dockerd not running"
    fi
    unmount_leftovers
}

case "${1:-start}" in
    start)
        [ "$(id -u)" -eq 0 ] || fail "dockerd needs root (run as root or under sudo)"
        install_packages
        start_daemon
        build_base
        check_runs
        echo "$DOCKER_HOST"
        ;;
    stop) stop_daemon ;;
    purge)
        stop_daemon
        rm -rf --one-file-system "$DIR" "$RUN"
        say "deleted $DIR and $RUN"
        ;;
    *) say "usage: $0 [start|stop|purge]"; exit 2 ;;
esac
