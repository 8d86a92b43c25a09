"""The dashboard page: static files from proxy/edge/static, no build step, nothing from a CDN.

The page itself holds no data and needs no key; it asks for the admin key once and calls the
admin API with it, so serving it openly reveals nothing.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from fastapi import APIRouter
from starlette.responses import Response

from session.errors import NotFound

router = APIRouter(include_in_schema=False)

ASSETS = {
    "dashboard.html": "text/html; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}

# Session ids and summaries are client-controlled text: the page renders them with textContent,
# and the policy forbids inline script and foreign origins in case a bug ever does not.
HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


@cache
def asset(name: str) -> bytes:
    """A packaged file of proxy/edge/static (read once; they do not change while running)."""
    return files("proxy.edge").joinpath("static", name).read_bytes()


def asset_response(name: str) -> Response:
    media_type = ASSETS.get(name)
    if media_type is None:
        raise NotFound(f"No dashboard file '{name}'.")
    return Response(asset(name), media_type=media_type, headers=HEADERS)


@router.get("/dashboard")
async def dashboard_page() -> Response:
    return asset_response("dashboard.html")


@router.get("/dashboard/{name}")
async def dashboard_asset(name: str) -> Response:
    return asset_response(name)
