"""Optional API key: `--api-key-file FILE`, `LANESERVE_API_KEY` or `--api-key KEY`.

Without a key every route is open (the default: the server binds loopback). With one, every
route registered through `protect` needs `Authorization: Bearer KEY` — the header the openai
client sends from `api_key=` and the ollama client from `headers=` or `OLLAMA_API_KEY` — except
PUBLIC_PATHS: the health probes, ours and llama-server's /health (load balancers and orchestrators
send no credentials) and
Ollama's `GET|HEAD /` liveness answer "Ollama is running" (the same fact as /health/live; llama-server
keeps `/` and `/health` open too), `/openapi.json` (the API's description, no model names or
traffic in it; vLLM serves its /openapi.json without its key too), and the web chat page `/ui` with
its static files `/ui/<asset>` (gateway/ui/: the same bytes for everyone; the page asks for the key
and sends it on its API calls, which stay protected). `/metrics` needs the key: its labels name the models and its
counters describe the traffic (Prometheus sends one with `authorization: credentials_file`); vLLM
leaves it open, llama-server does not. CORS preflights (OPTIONS, never authenticated by browsers) are
registered by gateway/http/cors.py outside this wrapper, so a configured origin still gets its preflight.

The check runs before the handler, hence before the body is parsed or a model looked up: an
unauthenticated request costs a header lookup and one digest. (Sanic has received the body by then,
bounded by --max-body-bytes and --request-deadline-s; refusing earlier, in its `http.routing.after`
signal, would save little: Sanic drains an unread body anyway to keep the connection.) Keys are compared as SHA-256 digests
with `hmac.compare_digest` (constant time, and the length of the key does not show either). A
failure answers 401 with `WWW-Authenticate: Bearer` (RFC 6750; `error="invalid_token"` for a wrong
key) in the route's protocol: the OpenAI envelope (`authentication_error` / `invalid_api_key`, which
openai-python raises as `AuthenticationError`), Ollama's `{"error": ...}` under /api/, or Anthropic's
`{"type": "error", "error": {"type": "authentication_error", ...}}` on the Messages routes, which also
take the key as `X-Api-Key` (only there: elsewhere a wrong Bearer with a right X-Api-Key stays
refused). Neither the key nor what the client sent is echoed, logged or counted.
"""
from __future__ import annotations

import functools
import hashlib
import hmac

import orjson
from sanic.response import HTTPResponse

from gateway.anthropic import errors as anthropic_errors
from gateway.http.errors import APIError
from gateway.http.request_ids import HEADER as REQUEST_ID_HEADER
from gateway.http.request_ids import new_request_id
from gateway.ui import routes as ui_routes

PUBLIC_PATHS = frozenset({"/health/live", "/health/ready", "/health", "/v1/health", "/", "/openapi.json",
                          ui_routes.PAGE_PATH, ui_routes.ASSET_PATH})
OLLAMA_PREFIX = "/api/"
MISSING = "missing"
INVALID = "invalid"
_MESSAGES = {
    MISSING: "No API key provided: send the header 'Authorization: Bearer <key>'",
    INVALID: "Invalid API key",
}
_ANTHROPIC_MESSAGES = {MISSING: "No API key provided: send the header 'x-api-key: <key>' or 'Authorization: Bearer <key>'"}
_CHALLENGES = {MISSING: "Bearer", INVALID: 'Bearer error="invalid_token"'}


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


class KeyCheck:
    """Holds only the digest of the configured key."""

    def __init__(self, key: str) -> None:
        self._digest = _digest(key.encode("ascii"))

    def failure(self, authorization: list[str]) -> str | None:
        """None when the `Authorization` header values carry the key, else MISSING or INVALID."""
        if not authorization:
            return MISSING
        if len(authorization) > 1:
            return INVALID
        scheme, _, token = authorization[0].strip().partition(" ")
        if scheme.lower() != "bearer":
            return INVALID
        return None if self._matches(token) else INVALID

    def api_key_failure(self, authorization: list[str], api_key: list[str]) -> str | None:
        """The Messages routes: the key in `Authorization: Bearer` (anthropic 2.15's `api_key=`) or in
        `X-Api-Key` (older Anthropic clients, curl users); either carrying it is enough."""
        reason = self.failure(authorization)
        if reason is None or not api_key:
            return reason
        return None if len(api_key) == 1 and self._matches(api_key[0]) else INVALID

    def _matches(self, token: str) -> bool:
        # surrogateescape: any header bytes hash; only the configured key's bytes match.
        sent = _digest(token.strip().encode("utf-8", "surrogateescape"))
        return hmac.compare_digest(sent, self._digest)


def _rejection(path: str, reason: str) -> tuple[bytes, dict[str, str]]:
    """The 401 body and headers for a route, built once per route and reason."""
    message = _MESSAGES[reason]
    if path.startswith(OLLAMA_PREFIX):
        body = orjson.dumps({"error": message})
    elif anthropic_errors.is_messages_path(path):
        body = anthropic_errors.body(APIError(401, _ANTHROPIC_MESSAGES.get(reason, message)))
    else:
        body = APIError(401, message, type="authentication_error", code="invalid_api_key").body()
    return body, {"WWW-Authenticate": _CHALLENGES[reason]}


def protect(handler, path: str, check: KeyCheck | None):
    """`handler` unchanged when no key is configured or `path` is public, else wrapped so that
    it runs only for requests that carry the key."""
    if check is None or path in PUBLIC_PATHS:
        return handler
    rejections = {reason: _rejection(path, reason) for reason in _MESSAGES}
    api_key_header = anthropic_errors.is_messages_path(path)

    @functools.wraps(handler)
    async def authenticated(request, *args, **kwargs):
        headers = request.headers
        reason = check.api_key_failure(headers.getall("authorization", []), headers.getall("x-api-key", [])) \
            if api_key_header else check.failure(headers.getall("authorization", []))
        if reason is None:
            return await handler(request, *args, **kwargs)
        # A fresh id, not the client's X-Request-ID: nothing an unauthenticated client sends is logged.
        request.ctx.request_id = request_id = new_request_id()
        request.app.ctx.state.log.info("unauthorized", request_id=request_id, route=path, reason=reason)
        body, headers = rejections[reason]
        return HTTPResponse(body, status=401, headers={**headers, REQUEST_ID_HEADER: request_id},
                            content_type="application/json")

    authenticated.laneserve_protected = True
    return authenticated


def key_check(config) -> KeyCheck | None:
    key = config.resolved_api_key()
    return None if key is None else KeyCheck(key)
