"""Structured outputs: every API's name for a constrained output → one llguidance grammar.

The lane constrains decoding with llguidance (csrc/grammar/); the gateway turns each request
field into llguidance's grammar format and validates it here, so a schema, regex or grammar that
does not compile is a 400 naming the field before any lane work. Names accepted:

  OpenAI        response_format {"type": "json_object"} | {"type": "json_schema", "json_schema":
                {"name", "schema", "strict", "description"}} | {"type": "text"}
  llama-server  response_format {"type": "json_object", "schema": {...}}, `json_schema` (object),
                `grammar` (GBNF)
  vLLM          guided_json, guided_regex, guided_grammar (GBNF or Lark), guided_choice, and
                structured_outputs {"json" | "regex" | "grammar" | "choice" | "json_object"}
  Ollama        format "json" | a JSON schema object

JSON is generated compact (no free whitespace between tokens): a small model given free
whitespace can loop on newlines forever; a schema's own "x-guidance" options override this.
`strict: false` (OpenAI) compiles leniently: keywords llguidance does not support are ignored
instead of refused. Integers without bounds are kept within ±(2^53 − 1), the range JSON numbers
keep exactly in every parser (RFC 7493, I-JSON): a grammar without a digit limit lets a small
model write "1111…" until the token limit, while a bounded one must close the number. An object
schema that lists `properties` and does not mention additionalProperties generates only those
(as llama.cpp's grammar converter does): otherwise a model may invent keys until the token limit.
"""
from __future__ import annotations

import functools
import json

from gateway.http.errors import invalid

MAX_GRAMMAR_CHARS = 256 * 1024
MAX_CHOICES = 1024
JSON_DEFAULTS = {"whitespace_flexible": False}
ANY_JSON_OBJECT = {"type": "object"}
# The top-level request fields that ask for a constrained output (besides response_format).
OPENAI_FIELDS = ("grammar", "json_schema", "guided_json", "guided_regex", "guided_grammar", "guided_choice",
                 "structured_outputs")


def _llguidance():
    import llguidance  # imported on first use: the gateway starts without paying for it

    return llguidance


@functools.lru_cache(maxsize=256)
def _compiled(kind: str, text: str, lenient: bool) -> tuple[str, str]:
    """(grammar, error message or "") for one grammar text; cached so a repeated schema costs
    a dictionary lookup."""
    llg = _llguidance()
    try:
        if kind == "json_schema":
            defaults = {**JSON_DEFAULTS, "lenient": True} if lenient else JSON_DEFAULTS
            grammar = llg.LLMatcher.grammar_from_json_schema(text, defaults=defaults)
        else:
            grammar = llg.grammar_from(kind, text)
    except (ValueError, TypeError) as exc:
        return "", str(exc)
    if not grammar.lstrip().startswith("{"):  # Lark text: the lane takes llguidance's JSON form only
        grammar = json.dumps({"grammars": [{"lark_grammar": grammar}]})
    is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar)
    return grammar, (messages[0] if is_error and messages else "")


def compile_grammar(kind: str, text: str, param: str, *, lenient: bool = False) -> str:
    """llguidance grammar for `text` of `kind` ("json_schema", "regex", "grammar" = GBNF or Lark,
    "lark"); a 400 naming `param` when it does not compile."""
    if len(text) > MAX_GRAMMAR_CHARS:
        raise invalid(f"'{param}' is longer than {MAX_GRAMMAR_CHARS} characters", param=param)
    grammar, error = _compiled(kind, text, lenient)
    if error:
        what = {"json_schema": "JSON schema", "regex": "regular expression"}.get(kind, "grammar")
        raise invalid(f"invalid {what} in '{param}': {error[:500]}", param=param, code="invalid_grammar")
    return grammar


SAFE_INTEGER_MAX = 2**53 - 1
_NOT_SCHEMAS = frozenset({"const", "enum", "default", "examples", "properties", "patternProperties", "$defs",
                          "definitions", "dependentSchemas"})


def bound_integers(schema):
    """A copy of the schema for generation: integer schemas without a lower/upper bound get the
    I-JSON one; objects with `properties` and no additionalProperties/patternProperties get
    additionalProperties false."""
    if type(schema) is list:
        return [bound_integers(s) for s in schema]
    if type(schema) is not dict:
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas") \
                and type(value) is dict:
            out[key] = {name: bound_integers(sub) for name, sub in value.items()}  # maps name → schema
        elif key in _NOT_SCHEMAS:
            out[key] = value  # data, not schemas
        else:
            out[key] = bound_integers(value)
    if type(out.get("properties")) is dict and "additionalProperties" not in out and "patternProperties" not in out \
            and "unevaluatedProperties" not in out:
        out["additionalProperties"] = False
    kind = out.get("type")
    if kind == "integer" or (type(kind) is list and "integer" in kind):
        if "minimum" not in out and "exclusiveMinimum" not in out:
            out["minimum"] = -SAFE_INTEGER_MAX
        if "maximum" not in out and "exclusiveMaximum" not in out:
            out["maximum"] = SAFE_INTEGER_MAX
    return out


def json_schema_grammar(schema, param: str, *, lenient: bool = False) -> str:
    if type(schema) is str:
        try:
            schema = json.loads(schema)
        except ValueError:
            raise invalid(f"'{param}' is not valid JSON", param=param, code="invalid_grammar") from None
    if type(schema) is bool:
        schema = {} if schema else {"not": {}}
    if type(schema) is not dict:
        raise invalid(f"'{param}' must be a JSON schema object", param=param, code="invalid_type")
    return compile_grammar("json_schema", json.dumps(bound_integers(schema), ensure_ascii=False), param,
                           lenient=lenient)


def _text(value, param: str) -> str:
    if type(value) is not str or not value:
        raise invalid(f"'{param}' must be a non-empty string", param=param, code="invalid_type")
    return value


def choice_grammar(choices, param: str) -> str:
    if type(choices) is not list or not choices or any(type(c) is not str or not c for c in choices):
        raise invalid(f"'{param}' must be a non-empty array of non-empty strings", param=param, code="invalid_type")
    if len(choices) > MAX_CHOICES:
        raise invalid(f"'{param}' accepts at most {MAX_CHOICES} choices", param=param)
    return compile_grammar("lark", "start: " + " | ".join(json.dumps(c) for c in dict.fromkeys(choices)), param)


def _response_format(value) -> str | None:
    param = "response_format"
    if type(value) is not dict:
        raise invalid("'response_format' must be an object", param=param, code="invalid_type")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = value.get("schema")  # llama-server's extension
        return json_schema_grammar(ANY_JSON_OBJECT if schema is None else schema, "response_format.schema")
    if kind == "json_schema":
        spec = value.get("json_schema")
        if type(spec) is not dict:
            raise invalid("'response_format.json_schema' must be an object", param="response_format.json_schema",
                          code="invalid_type")
        return _json_schema_spec(spec, "response_format.json_schema")
    raise invalid("'response_format.type' must be 'text', 'json_object' or 'json_schema'",
                  param="response_format.type")


def _json_schema_spec(spec: dict, param: str) -> str:
    """`{"name", "schema", "strict"}` (chat's response_format.json_schema, the Responses API's text.format)."""
    name = spec.get("name")
    if name is not None and (type(name) is not str or len(name) > 64):
        raise invalid(f"'{param}.name' must be a string of at most 64 characters", param=f"{param}.name")
    strict = spec.get("strict")
    if strict is not None and type(strict) is not bool:
        raise invalid(f"'{param}.strict' must be true or false", param=f"{param}.strict", code="invalid_type")
    schema = spec.get("schema")
    return json_schema_grammar(ANY_JSON_OBJECT if schema is None else schema, f"{param}.schema",
                               lenient=strict is False)


def from_text_format(value) -> str | None:
    """The Responses API's `text.format`: text, json_object, or json_schema with its fields beside `type`."""
    param = "text.format"
    if value is None:
        return None
    if type(value) is not dict:
        raise invalid(f"'{param}' must be an object", param=param, code="invalid_type")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return json_schema_grammar(ANY_JSON_OBJECT, param)
    if kind == "json_schema":
        return _json_schema_spec(value, param)
    raise invalid(f"'{param}.type' must be 'text', 'json_object' or 'json_schema'", param=f"{param}.type")


def _structured_outputs(value) -> str:
    param = "structured_outputs"
    if type(value) is not dict:
        raise invalid(f"'{param}' must be an object", param=param, code="invalid_type")
    given = [k for k, v in value.items() if v is not None and v is not False]
    known = ("json", "regex", "grammar", "choice", "json_object")
    unknown = [k for k in given if k not in known]
    if unknown:
        raise invalid(f"'{param}.{unknown[0]}' is not supported (use one of {', '.join(known)})",
                      param=f"{param}.{unknown[0]}", code="unsupported_parameter")
    if len(given) != 1:
        raise invalid(f"'{param}' needs exactly one of {', '.join(known)}", param=param)
    key = given[0]
    sub = f"{param}.{key}"
    if key == "json":
        return json_schema_grammar(value[key], sub)
    if key == "json_object":
        return json_schema_grammar(ANY_JSON_OBJECT, sub)
    if key == "choice":
        return choice_grammar(value[key], sub)
    return compile_grammar("regex" if key == "regex" else "grammar", _text(value[key], sub), sub)


def from_openai(body: dict) -> tuple[str | None, str | None]:
    """(grammar, the field that asked) from an OpenAI-protocol body; (None, None) when the
    output is free. At most one of the fields may be given."""
    given = [name for name in ("response_format", *OPENAI_FIELDS) if body.get(name) is not None]
    if len(given) > 1:
        raise invalid(f"'{given[0]}' and '{given[1]}' both constrain the output; send one", param=given[1])
    if not given:
        return None, None
    name = given[0]
    value = body[name]
    if name == "response_format":
        grammar = _response_format(value)
    elif name in ("json_schema", "guided_json"):
        grammar = json_schema_grammar(value, name)
    elif name == "guided_regex":
        grammar = compile_grammar("regex", _text(value, name), name)
    elif name in ("grammar", "guided_grammar"):
        grammar = compile_grammar("grammar", _text(value, name), name)
    elif name == "guided_choice":
        grammar = choice_grammar(value, name)
    else:
        grammar = _structured_outputs(value)
    return grammar, (name if grammar is not None else None)


def from_ollama_format(value) -> str | None:
    """Ollama's `format`: "json" (any JSON object) or a JSON schema; "" / null: free text."""
    if value is None or value == "":
        return None
    if value == "json":
        return json_schema_grammar(ANY_JSON_OBJECT, "format")
    if type(value) is dict:
        return json_schema_grammar(value, "format")
    raise invalid("'format' must be \"json\" or a JSON schema object", param="format", code="invalid_type")


# OpenAPI shapes of the request fields above (gateway/server/openapi.py renders them; from_openai validates).
_NULL = {"type": "null"}
_SCHEMA_OBJECT = {"type": ["object", "boolean"], "description": "a JSON schema"}
_TEXT = {"type": "string", "minLength": 1, "maxLength": MAX_GRAMMAR_CHARS}
_CHOICES = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": MAX_CHOICES}
SCHEMA_SHAPES = {
    "response_format": ("the output's format: text, any JSON object, or a JSON schema", {"anyOf": [_NULL, {
        "type": "object", "required": ["type"], "properties": {
            "type": {"enum": ["text", "json_object", "json_schema"]},
            "schema": _SCHEMA_OBJECT,
            "json_schema": {"type": "object", "properties": {
                "name": {"type": "string", "maxLength": 64}, "description": {"type": "string"},
                "schema": _SCHEMA_OBJECT, "strict": {"type": ["boolean", "null"]}}}}}]}),
    "grammar": ("llama-server: a GBNF grammar the output follows", {"anyOf": [_NULL, _TEXT]}),
    "json_schema": ("llama-server: a JSON schema the output follows", {"anyOf": [_NULL, _SCHEMA_OBJECT]}),
    "guided_json": ("vLLM: a JSON schema (object or JSON text)", {"anyOf": [_NULL, _SCHEMA_OBJECT, _TEXT]}),
    "guided_regex": ("vLLM: a regular expression the output matches", {"anyOf": [_NULL, _TEXT]}),
    "guided_grammar": ("vLLM: a GBNF or Lark grammar", {"anyOf": [_NULL, _TEXT]}),
    "guided_choice": ("vLLM: the output is one of these strings", {"anyOf": [_NULL, _CHOICES]}),
    "structured_outputs": ("vLLM: exactly one of json, regex, grammar, choice, json_object", {"anyOf": [_NULL, {
        "type": "object", "properties": {"json": {"anyOf": [_SCHEMA_OBJECT, _TEXT]}, "regex": _TEXT,
                                         "grammar": _TEXT, "choice": _CHOICES, "json_object": {"type": "boolean"}},
        "additionalProperties": False, "minProperties": 1}]}),
}
