"""POST /tokenize and /detokenize in both shapes benchmark tools send:
vLLM `{"model","prompt"|"messages","add_special_tokens"}` → `{"count","max_model_len","tokens"}`,
`{"model","tokens"}` → `{"prompt"}`; llama.cpp `{"content","add_special","with_pieces"}` →
`{"tokens"}`, `{"tokens"}` → `{"content"}`. Answers carry both shapes' keys."""
from __future__ import annotations

import orjson
from sanic.response import HTTPResponse

from gateway.http.body import parse_json_object
from gateway.http.errors import invalid
from gateway.http.fields import get_bool, get_object, get_str
from gateway.openai.requests import CHAT_FIELDS, check_fields, parse_messages, template_kwargs

MAX_TEXT_CHARS = 4 * 1024 * 1024
_TEXT = {"type": ["string", "null"], "maxLength": MAX_TEXT_CHARS}
_FLAG = {"type": ["boolean", "null"]}
_MODEL = {"type": ["string", "null"], "description": "optional when one model is served"}
# JSON Schema of what the handlers below read (gateway/server/openapi.py renders it).
TOKENIZE_FIELDS = {"model": _MODEL, "prompt": _TEXT, "content": _TEXT, "messages": {"anyOf": [CHAT_FIELDS["messages"].schema(), {"type": "null"}]},
                   "add_special_tokens": _FLAG, "add_special": _FLAG, "parse_special": _FLAG, "with_pieces": _FLAG,
                   "add_generation_prompt": {"description": "accepted; the chat template always adds it"},
                   "chat_template_kwargs": CHAT_FIELDS["chat_template_kwargs"].schema()}
DETOKENIZE_FIELDS = {"model": _MODEL, "tokens": {"type": "array", "items": {"type": "integer"}}}
DETOKENIZE_REQUIRED = ("tokens",)


def _body(request) -> dict:
    state = request.app.ctx.state
    return parse_json_object(request.body, request.headers.get("content-type"), state.config.max_json_depth)


async def tokenize(request):
    state = request.app.ctx.state
    body = _body(request)
    check_fields(body, TOKENIZE_FIELDS, state.config.lenient)
    # Every field is checked whatever the branch, so a bad flag is a 400 even when unused.
    text = get_str(body, "prompt", None, MAX_TEXT_CHARS)
    text = get_str(body, "content", text, MAX_TEXT_CHARS)
    add_special = get_bool(body, "add_special_tokens", get_bool(body, "add_special", True))
    with_pieces = get_bool(body, "with_pieces", False)
    parse_special = get_bool(body, "parse_special", True)
    get_object(body, "chat_template_kwargs")
    served = state.default_model(body.get("model"))
    if body.get("messages") is not None:
        ids = served.text.encode_chat(list(parse_messages(body, state.config.lenient)), template_kwargs(body))
    else:
        if text is None:
            raise invalid("one of 'prompt', 'content' or 'messages' is required", param="prompt",
                          code="missing_required_parameter")
        ids = served.text.encode_prompt(text, add_special=add_special, parse_special=parse_special)
    tokens = ids
    if with_pieces:
        tokens = [{"id": t, "piece": served.text.piece(t)} for t in ids]
    out = {"tokens": tokens, "count": len(ids), "max_model_len": served.n_ctx}
    return HTTPResponse(orjson.dumps(out), content_type="application/json")


async def detokenize(request):
    state = request.app.ctx.state
    body = _body(request)
    check_fields(body, DETOKENIZE_FIELDS, state.config.lenient)
    served = state.default_model(body.get("model"))
    tokens = body.get("tokens")
    if type(tokens) is not list or any(type(t) is not int for t in tokens):
        raise invalid("'tokens' must be an array of token ids", param="tokens", code="invalid_type")
    served.text.check_token_ids(tokens, "tokens")
    text = served.text.decode(tokens)
    return HTTPResponse(orjson.dumps({"prompt": text, "content": text}), content_type="application/json")
