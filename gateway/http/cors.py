"""Optional CORS (`--cors-origins`): off by default, since the server binds loopback and its API
key is optional; browsers on other origins get in only when an operator names them (or `*`).
Preflights are registered here, outside gateway/http/auth.py's check: browsers send no credentials on
OPTIONS."""
from __future__ import annotations

from sanic.response import HTTPResponse

PREFLIGHT_PATHS = ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize", "/stop",
                   "/v1/requests/<request_id:str>")


def cors_headers(origins: tuple[str, ...], request_origin: str | None) -> dict:
    if not origins or not request_origin:
        return {}
    if "*" in origins:
        return {"Access-Control-Allow-Origin": "*"}
    if request_origin in origins:
        return {"Access-Control-Allow-Origin": request_origin, "Vary": "Origin"}
    return {}


def add_cors(app, origins: tuple[str, ...]) -> None:
    if not origins:
        return

    async def preflight(request):
        headers = cors_headers(origins, request.headers.get("origin"))
        if headers:
            headers.update({
                "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
                "Access-Control-Allow-Headers": "Content-Type, Authorization, X-Request-ID, X-Session-ID",
                "Access-Control-Expose-Headers": "X-Request-ID, Retry-After",
                "Access-Control-Max-Age": "600",
            })
        return HTTPResponse(status=204, headers=headers)

    for path in PREFLIGHT_PATHS:
        app.add_route(preflight, path, methods=["OPTIONS"], name=f"preflight{path.replace('/', '_').replace('<', '').replace('>', '').replace(':', '_')}")

    @app.on_response
    async def add_origin(request, response):
        for key, value in cors_headers(origins, request.headers.get("origin")).items():
            response.headers.setdefault(key, value)
