"""GET /ui: the web chat page, and GET /ui/<asset>: its script modules, stylesheet and icon.

The files in static/ ship as package data and are read once, on the first request; only those
names are served (an allow-list, no path is joined from the request). The page talks to this
server only: its Content-Security-Policy allows scripts, styles, images and fetches from the same
origin, and images from data: URIs (the user's own attached pictures, kept in the conversation), and
nothing else (no inline script, no CDN), a second line of defence behind the page's
renderer, which builds model text into DOM nodes as text. The page calls the API from the same
origin, so it needs no CORS; it is public (gateway/http/auth.py), and its API calls carry the key.
"""
from __future__ import annotations

import functools
from importlib import resources

from sanic.response import HTTPResponse

from gateway.http.errors import APIError

PAGE_PATH = "/ui"
ASSET_PATH = "/ui/<asset:str>"
PAGE = "index.html"
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # revalidate: an upgraded server never runs a stale script
}


@functools.cache
def _assets() -> dict[str, tuple[bytes, str]]:
    """File name → (bytes, Content-Type) of every static file with a known type."""
    folder = resources.files(__package__) / "static"
    out = {}
    for entry in folder.iterdir():
        kind = _TYPES.get("." + entry.name.rpartition(".")[2])
        if kind and entry.is_file():
            out[entry.name] = (entry.read_bytes(), kind)
    return out


def _file(name: str) -> HTTPResponse:
    found = _assets().get(name)
    if found is None:
        raise APIError(404, "no such file of the web UI", code="not_found")
    body, kind = found
    return HTTPResponse(body, content_type=kind, headers=HEADERS)


async def page(request):
    return _file(PAGE)


async def asset(request, asset: str):
    return _file(asset)
