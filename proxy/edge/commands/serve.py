"""`ctxgate serve`: the proxy, from a config file or, without one, from the environment.

Before it listens it refuses an upstream whose base URL is its own address (a shell's
`OPENAI_BASE_URL` or `ANTHROPIC_BASE_URL` often still points at a ctxgate: every request would
come back to it), and it says, per upstream, which APIs go where and whose credential travels.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import uvicorn

from proxy.config_file import load_settings, worker_count
from proxy.edge.app import create_app
from proxy.edge.logs import configure_logging
from session.config.display import mask_url
from session.config.environment import origins
from session.config.settings import Settings, UpstreamSettings

log = logging.getLogger("ctxgate")

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}
WILDCARDS = {"", "0.0.0.0", "::"}


def main(args: argparse.Namespace) -> int:
    environ = os.environ  # noqa: TID251 (the zero-config upstreams' origins, for the lines)
    settings = load_settings(args.config, environ)
    configure_logging(settings.logging)
    host = args.host or settings.server.host
    port = args.port or settings.server.port
    workers = settings.server.workers
    if args.workers is not None:
        workers = worker_count(args.workers, "--workers")
    where = Origins.of(settings, args.config, environ)
    loops = self_pointing(settings, host, port, socket.gethostname())
    if loops:
        for name in loops:
            print(
                f"ctxgate: {loop_message(settings.upstreams[name], where, host, port)}",
                file=sys.stderr,
            )
        return 2
    if not settings.auth.keys and host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "no auth.keys configured and listening on %s: anyone who reaches this port can use "
            "ctxgate, and the upstream keys configured in it",
            host,
        )
    for line in startup_lines(settings, where):
        log.info("%s", line)
    if workers > 1:
        from proxy.edge.workers import serve_workers

        return serve_workers(settings, host, port, workers, tune_gc)
    app = create_app(settings)
    log.info(
        "ctxgate listening on http://%s:%d (storage %s)",
        host,
        port,
        settings.storage.url.split("://")[0],
    )
    tune_gc()
    uvicorn.run(
        app, host=host, port=port, log_config=None, access_log=False, timeout_graceful_shutdown=10
    )
    return 0


def tune_gc() -> None:
    """Keep the cyclic collector off the request path.

    Parsing one agent request allocates thousands of containers, so CPython's default
    (a young collection every 700 allocations, full ones scanning every module loaded at
    start-up) runs collections inside most requests. Request objects are freed by reference
    counting; only rare cycles need the collector, so it can run far less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


@dataclass(frozen=True, slots=True)
class Origins:
    """What set each upstream's base URL and key, in the user's words: an environment variable
    (zero config) or a key of the config file."""

    base: Mapping[str, str]
    key: Mapping[str, str]

    @classmethod
    def of(cls, settings: Settings, config: str | None, environ: Mapping[str, str]) -> Origins:
        if config is None:
            base, key = origins(environ)
            return cls(base, key)
        names = settings.upstreams
        return cls(
            {name: f"upstreams.{name}.base_url in {config}" for name in names},
            {name: f"upstreams.{name}.api_key in {config}" for name in names},
        )


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def reaches(target: str, host: str, hostname: str) -> bool:
    """Whether a URL naming host `target` reaches a server listening on `host` on this
    machine (whose name is `hostname`): `target` resolves to an address the server listens
    on, or to any address of this machine when the server listens on every one. Any spelling
    of an address counts (`127.1`, `0x7f000001`, `localhost.`, `::ffff:127.0.0.1`, the
    machine's own LAN address): the loop is the same whichever way the URL writes it."""
    listening = _listen_addresses(host)
    everywhere = any(address.is_unspecified for address in listening)
    if everywhere and target.lower().rstrip(".") == hostname.lower():
        return True  # the machine's own name, even where it does not resolve
    return any(
        address in listening or (everywhere and _is_this_machine(address))
        for address in map(_connected_to, _addresses(target))
    )


def _listen_addresses(host: str) -> set[Address]:
    if host in WILDCARDS:
        return {ipaddress.IPv4Address(0), ipaddress.IPv6Address(0)}
    return _addresses(host)


def _addresses(name: str) -> set[Address]:
    """What `name` resolves to on this machine, IPv4-mapped IPv6 unwrapped; none when it does
    not resolve (a name this machine cannot resolve is not this machine)."""
    name = name.strip("[]").rstrip(".")
    found: set[Address] = set()
    if name.lower() in LOOPBACK_NAMES:
        found |= {ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1")}
    if not name:
        return found
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return found
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        found.add(mapped or address)
    return found


def _connected_to(address: Address) -> Address:
    """The address a connection to `address` lands on: the kernel sends one to the unspecified
    address to loopback."""
    if not address.is_unspecified:
        return address
    if address.version == 4:
        return ipaddress.IPv4Address("127.0.0.1")
    return ipaddress.IPv6Address("::1")


def _is_this_machine(address: Address) -> bool:
    """Loopback, or an address one of this machine's interfaces holds (a socket can be bound
    to it)."""
    if address.is_loopback or address.is_unspecified:
        return True
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


def self_pointing(settings: Settings, host: str, port: int, hostname: str) -> list[str]:
    """The upstreams whose base URL is this server's own address (same host, same port)."""
    found = []
    for name, upstream in settings.upstreams.items():
        url = urlsplit(upstream.base_url)
        try:
            target_port = url.port or (443 if url.scheme == "https" else 80)
        except ValueError:
            continue
        if target_port == port and reaches(url.hostname or "", host, hostname):
            found.append(name)
    return found


def loop_message(upstream: UpstreamSettings, where: Origins, host: str, port: int) -> str:
    source = where.base.get(upstream.name) or "the provider's default URL"
    return (
        f"the upstream {upstream.name!r} is this ctxgate itself: its base URL "
        f"{mask_url(upstream.base_url)} (from {source}) is the address ctxgate would listen on "
        f"({host}:{port}), so every request would come back to it. Point {source} at the "
        f"provider (or unset it for the provider's public URL), or serve on another --port."
    )


def startup_lines(settings: Settings, where: Origins) -> list[str]:
    """One line per upstream: the APIs it serves, where they go, whose credential travels."""
    lines = []
    for name, upstream in settings.upstreams.items():
        source = where.base.get(name)
        origin = f"from {source}" if source else "the provider's public URL"
        lines.append(
            f"{', '.join(upstream.apis)} -> {upstream.base_url} "
            f"(upstream {name}, {origin}); auth: {auth_mode(settings, upstream, where)}"
        )
    return lines


def auth_mode(settings: Settings, upstream: UpstreamSettings, where: Origins) -> str:
    """Whose credential reaches this upstream, as the request path decides it
    (session/ports/headers.py, proxy/gateway/auth.py)."""
    key = where.key.get(upstream.name, f"upstreams.{upstream.name}.api_key")
    sent = f"sent as {upstream.auth}"
    if settings.auth.keys:
        if upstream.api_key:
            return f"clients must present one of auth.keys; ctxgate's key from {key} is {sent}"
        return (
            "clients must present one of auth.keys, which never travels upstream, and no key "
            f"is configured ({key} is unset): requests reach this upstream without a credential"
        )
    if upstream.api_key:
        return f"the client's credential is replaced by ctxgate's key from {key}, {sent}"
    return f"the client's own credential is passed upstream ({key} is unset)"
