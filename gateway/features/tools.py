"""Tool calling: request fields → prompt rendering and an output grammar.

One output format for every model: calls are written as

    <tool_call>
    {"name":"get_weather","arguments":{"city":"Paris"}}
    </tool_call>

which is what Qwen/Hermes-style templates (those that render `tools` themselves) train their
models to write. Templates without tool support (SmolLM2's, Gemma's) get the same format taught by
a system message listing the functions (the generic mode); their history turns are rewritten the
same way: assistant calls as <tool_call> blocks, tool results as user turns in <tool_response>.

The lane enforces the format with a grammar (llguidance Lark, gateway.features.structured):
  required / named   only calls, each `{"name": one of the allowed, "arguments": that function's
                     parameter schema}` — the arguments always satisfy the schema;
  auto               free text, constrained lazily: the grammar lets anything through until the
                     model writes `<tool_call>`, then forces a valid call;
  none               no grammar, no tools in the prompt.
parallel_tool_calls false allows one call only, and is the default when the request does not
say (as llama-server): small models asked for "one or more" calls tend to repeat a call until the
token limit. `parallel_tool_calls: true` allows several.

Templates that render tools in another format get it instead: Llama 3 (LLAMA3, one bare JSON call)
and gpt-oss (HARMONY: a message to functions.NAME, which the lane rewrites into one form; its grammar
admits the harmony messages before the call, since a lazy rule is one lexeme and cannot take in the
control tokens of the messages before it).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from gateway.http.errors import invalid
from gateway.features.structured import bound_integers, compile_grammar

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"


@dataclass(frozen=True)
class CallFormat:
    """How a model writes a call: `open` + {"name": …, args_key: {…}} + `close`."""
    name: str
    open: str
    close: str
    args_key: str


# Qwen/Hermes (and our generic mode): <tool_call> blocks, as many as parallel_tool_calls allows.
HERMES = CallFormat("hermes", CALL_OPEN + "\n", "\n" + CALL_CLOSE, "arguments")
# Llama 3.x templates: the answer is one bare JSON object {"name": …, "parameters": {…}}.
LLAMA3 = CallFormat("llama3", "", "", "parameters")
# gpt-oss (harmony): a message to functions.NAME, its body the arguments. The lane's splitter
# (csrc/engine/reasoning_splitter.h, ReasoningMarkers.calls) writes every such message to content
# in this one form, `open` NAME "<|message|>" ARGS `close`, wherever the model put the recipient.
HARMONY = CallFormat("harmony", "<|channel|>commentary to=functions.", "<|call|>", "")
HARMONY_NAME_END = "<|message|>"
# The control tokens tool_grammar names (<|end|> is text: the runtime's tokenizer makes it user-defined).
HARMONY_CONTROL = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")


def template_tool_format(source: str | None) -> CallFormat | None:
    """The call format a template renders tools for; None: it does not (the generic mode)."""
    if not source or "tools" not in source:
        return None
    if "<|channel|>" in source and HARMONY.close in source:
        return HARMONY
    if CALL_OPEN in source:
        return HERMES
    if "<|python_tag|>" in source or '"parameters"' in source:
        return LLAMA3
    return None
MAX_TOOLS = 128
MAX_NAME_CHARS = 64
TOOL_CHOICES = ("none", "auto", "required")


@dataclass(frozen=True)
class Tools:
    functions: tuple[dict, ...]  # {"name", "description", "parameters"} (parameters: a JSON schema)
    choice: str = "auto"         # "auto" | "required" | "none" | "named"
    name: str | None = None      # the function of a named choice
    parallel: bool = False
    fmt: CallFormat = HERMES     # the served model's (gateway.text.model_text.ModelText.tool_format)

    @property
    def active(self) -> bool:
        return self.choice != "none" and bool(self.functions)

    def allowed(self) -> tuple[dict, ...]:
        if self.choice == "named":
            return tuple(f for f in self.functions if f["name"] == self.name)
        return self.functions


def _function(tool, i: int, flat: bool) -> dict:
    param = f"tools[{i}]"
    if type(tool) is not dict:
        raise invalid("each tool must be an object", param=param, code="invalid_type")
    if tool.get("type", "function") != "function":
        raise invalid("only tools of type 'function' are supported", param=f"{param}.type")
    fn = tool if flat else tool.get("function")
    if type(fn) is not dict:
        raise invalid("a tool needs a 'function' object", param=f"{param}.function", code="invalid_type")
    at = param if flat else f"{param}.function"
    name = fn.get("name")
    if type(name) is not str or not name or len(name) > MAX_NAME_CHARS:
        raise invalid(f"function names must be strings of 1 to {MAX_NAME_CHARS} characters", param=f"{at}.name")
    description = fn.get("description")
    if description is not None and type(description) is not str:
        raise invalid("a function description must be a string", param=f"{at}.description")
    strict = fn.get("strict")
    if strict is not None and type(strict) is not bool:
        raise invalid("'strict' must be true or false", param=f"{at}.strict", code="invalid_type")
    parameters = fn.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if type(parameters) is not dict:
        raise invalid("function parameters must be a JSON schema object", param=f"{at}.parameters",
                      code="invalid_type")
    out = {"name": name, "parameters": parameters}
    if description:
        out["description"] = description
    return out


def _named_choice(choice: dict, flat: bool) -> str | None:
    """The function a {"type": "function", ...} tool_choice names (flat: the Responses API's
    `{"type", "name"}`; else chat's `{"type", "function": {"name"}}`), None when malformed."""
    fn = choice if flat else choice.get("function")
    name = fn.get("name") if type(fn) is dict else None
    return name if choice.get("type") == "function" and type(name) is str else None


def parse_tools(body: dict, *, flat: bool = False) -> Tools | None:
    """Tools of an OpenAI (or Ollama) chat body; None when the request has none. `flat`: the
    Responses API's shape, a tool's fields beside its `type` instead of inside `function`."""
    value = body.get("tools")
    choice = body.get("tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and type(parallel) is not bool:
        raise invalid("'parallel_tool_calls' must be true or false", param="parallel_tool_calls", code="invalid_type")
    if value is not None and type(value) is not list:  # a falsy non-array used to pass as "no tools"
        raise invalid("'tools' must be an array", param="tools", code="invalid_type")
    if not value:
        if choice not in (None, "none", "auto"):
            raise invalid("'tool_choice' needs 'tools'", param="tool_choice")
        return None
    if type(value) is not list or len(value) > MAX_TOOLS:
        raise invalid(f"'tools' must be an array of at most {MAX_TOOLS} tools", param="tools", code="invalid_type")
    functions = tuple(_function(t, i, flat) for i, t in enumerate(value))
    names = [f["name"] for f in functions]
    if len(set(names)) != len(names):
        raise invalid("function names must be unique", param="tools")
    name = None
    if choice is None:
        choice = "auto"
    elif type(choice) is dict:
        name = _named_choice(choice, flat)
        if name is None:
            shape = '{"type": "function", "name": ...}' if flat else '{"type": "function", "function": {"name": ...}}'
            raise invalid(f"'tool_choice' must be 'none', 'auto', 'required' or {shape}", param="tool_choice")
        if name not in names:
            raise invalid("'tool_choice' names a function that is not in 'tools'", param="tool_choice")
        choice = "named"
    elif choice not in TOOL_CHOICES:
        raise invalid("'tool_choice' must be 'none', 'auto', 'required' or a function", param="tool_choice")
    tools = Tools(functions, choice, name, bool(parallel))
    for i, f in enumerate(tools.functions):
        _check_schema(f["parameters"], f"tools[{i}].parameters" if flat else f"tools[{i}].function.parameters")
    return tools


def _check_schema(schema: dict, param: str) -> None:
    from gateway.features.structured import json_schema_grammar

    json_schema_grammar(schema, param)  # 400 naming the tool when its schema does not compile


def _call_schema(tools: Tools) -> dict:
    key = tools.fmt.args_key
    variants = [{"type": "object", "properties": {"name": {"const": f["name"]}, key: bound_integers(f["parameters"])},
                 "required": ["name", key], "additionalProperties": False} for f in tools.allowed()]
    schema = variants[0] if len(variants) == 1 else {"anyOf": variants}
    return {**schema, "x-guidance": {"whitespace_flexible": False}}


def _harmony_grammar(tools: Tools, control_ids: dict[str, tuple[int, ...]]) -> str:
    """gpt-oss: analysis and commentary messages, then a call to one of the allowed functions with
    arguments that satisfy its schema, or (auto) a final message. A call's recipient may stand in the
    role or the channel header, with or without its constraint, as llama.cpp's gpt-oss parser reads
    them. Control tokens by id when `control_ids` has them (every copy), else by name."""
    def tok(text: str) -> str:
        ids = control_ids.get(text)
        return f"<[{','.join(map(str, ids))}]>" if ids else text

    channel, message, start, constrain = (tok(t) for t in HARMONY_CONTROL)
    calls = []
    for i, f in enumerate(tools.allowed()):
        to = " to=functions." + f["name"]
        args = json.dumps({**bound_integers(f["parameters"]), "x-guidance": {"whitespace_flexible": False}})
        calls.append(f'call{i}: ({json.dumps(to)} {channel} "commentary" | {channel} '
                     f'{json.dumps("commentary" + to)}) constraint? {message} %json {args}\n')
    lark = (f'pre: {channel} ("analysis" | "commentary") {message} body {start} "assistant"\n'
            'body[lazy]: TEXT "<|end|>"\n'
            f'constraint: " json" | " " {constrain} "json"\n'
            "TEXT: /(.|\\n)*/\n"
            f"call: {' | '.join(f'call{i}' for i in range(len(calls)))}\n" + "".join(calls))
    more = f' ("<|end|>" {start} "assistant" call)*' if tools.parallel else ""
    if tools.choice == "auto":
        lark = f'start: pre* (call{more} | final)\nfinal: {channel} "final" constraint? {message} TEXT\n' + lark
    else:
        lark = f"start: pre* call{more}\n" + lark
    return compile_grammar("lark", lark, "tools")


def tool_grammar(tools: Tools, control_ids: dict[str, tuple[int, ...]] | None = None) -> str:
    """The llguidance grammar of the assistant's answer under `tools` (active only); `control_ids`:
    the served model's (gateway.text.model_text.ModelText.control_ids, harmony only)."""
    if tools.fmt is HARMONY:
        return _harmony_grammar(tools, control_ids or {})
    if tools.fmt is LLAMA3:  # one bare call, or (auto) an answer that does not start with "{"
        call = f"call: %json {json.dumps(_call_schema(tools))}\n"
        free = "start: call | TEXT\nTEXT: /[^{\\s](.|\\n)*/\n" if tools.choice == "auto" else "start: call\n"
        return compile_grammar("lark", free + call, "tools")
    call = f'"{CALL_OPEN}\\n" %json {json.dumps(_call_schema(tools))} "\\n{CALL_CLOSE}"'
    if tools.choice == "auto":
        lark = ("start: tail | call\n" if not tools.parallel else "start: call* tail\n")
        lark += ("tail: TEXT\nTEXT: /(.|\\n)*/\n"
                 f'head[lazy]: TEXT "{CALL_OPEN}"\n'
                 f'call: head "\\n" %json {json.dumps(_call_schema(tools))} "\\n{CALL_CLOSE}"\n')
    else:
        more = ' ("\\n" call)*' if tools.parallel else ""
        lark = f"start: call{more}\ncall: {call}\n"
    return compile_grammar("lark", lark, "tools")


def system_prompt(tools: Tools) -> str:
    """The generic mode's instructions (templates that do not render tools)."""
    listing = "\n".join(json.dumps(f, ensure_ascii=False) for f in tools.allowed())
    if tools.choice == "auto":
        when = "If a function helps answer, call it; otherwise answer normally."
    else:
        when = "You must call a function now."
    many = "You may make several calls, one block each." if tools.parallel else "Make exactly one call."
    return (f"You can call these functions:\n{listing}\n\n{when} To call a function, write exactly:\n"
            f"{CALL_OPEN}\n{{\"name\":\"<function name>\",\"arguments\":{{<arguments as JSON>}}}}\n{CALL_CLOSE}\n{many}")


def call_block(name: str, arguments) -> str:
    if type(arguments) is str:
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    return f"{CALL_OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CALL_CLOSE}"


def generic_messages(messages: list[dict], tools: Tools | None) -> list[dict]:
    """History for a template without tool support: tool calls and results as text turns, the
    function list in the system turn, consecutive turns of one role merged (Gemma's template
    requires alternating roles)."""
    out: list[dict] = []
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "assistant" and m.get("tool_calls"):
            blocks = [call_block(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"]]
            content = "\n".join(([content] if content else []) + blocks)
        elif role == "tool":
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        if out and out[-1]["role"] == role and role != "system":
            out[-1] = {"role": role, "content": out[-1]["content"] + "\n" + content}
        else:
            out.append({"role": role, "content": content})
    if out and messages[-1]["role"] == "assistant" and messages[-1].get("tool_calls"):
        # Written as text, a final call turn is still a call turn: closed, never continued as prefill
        # (gateway.text.prefill); an empty list renders as no calls.
        out[-1] = {**out[-1], "tool_calls": []}
    if tools is not None and tools.active:
        prompt = system_prompt(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + prompt}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def tool_calls_of_message(value, param: str) -> list[dict]:
    """Assistant `tool_calls` sent back in the history, normalised to the OpenAI shape with
    `arguments` as an object where it is JSON (templates render it with tojson). Ollama sends
    arguments as an object already and no id or type."""
    if type(value) is not list:
        raise invalid("'tool_calls' must be an array", param=param, code="invalid_type")
    out = []
    for i, call in enumerate(value):
        fn = call.get("function") if type(call) is dict else None
        if type(fn) is not dict or type(fn.get("name")) is not str:
            raise invalid("each tool call needs a function with a name", param=f"{param}[{i}]", code="invalid_type")
        if call.get("id") is not None and type(call["id"]) is not str:
            raise invalid("a tool call id must be a string", param=f"{param}[{i}].id", code="invalid_type")
        if call.get("type") not in (None, "function"):
            raise invalid("a tool call's type must be 'function'", param=f"{param}[{i}].type")
        arguments = fn.get("arguments", {})
        if type(arguments) is str:
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                pass  # rendered as the string it is
        elif type(arguments) is not dict:
            raise invalid("tool call arguments must be a JSON string or an object", param=f"{param}[{i}]",
                          code="invalid_type")
        out.append({"id": call.get("id") if type(call.get("id")) is str else f"call_{i}", "type": "function",
                    "function": {"name": fn["name"], "arguments": arguments}})
    return out


def template_tools(tools: Tools | None) -> list[dict] | None:
    """`tools` as a template that renders them expects (OpenAI shape)."""
    if tools is None or not tools.active:
        return None
    return [{"type": "function", "function": f} for f in tools.allowed()]


def tool_call_thinking(normal: dict, message: dict, keys: tuple[str, ...]) -> None:
    """A parsed history turn `normal` (of request `message`) that made tool calls keeps its
    reasoning (the first string of `keys` in the message) as `thinking`: gpt-oss's template renders
    it as the analysis before the call, as llama-server passes reasoning_content. chat_for_template
    removes it for every other template (reasoning is otherwise never rendered again)."""
    if normal["role"] == "assistant" and normal.get("tool_calls"):
        text = next((message[k] for k in keys if type(message.get(k)) is str and message[k]), None)
        if text is not None:
            normal["thinking"] = text


def _history_thinking(messages: list[dict], harmony: bool) -> list[dict]:
    """harmony: a turn with `thinking` renders it instead of its content (llama-server drops the
    content then; gpt-oss's template refuses both); any other template: `thinking` removed."""
    drop = "content" if harmony else "thinking"
    return [{k: v for k, v in m.items() if k != drop} if "thinking" in m else m for m in messages]


def chat_for_template(messages: list[dict], template_kwargs: dict, tools: Tools | None,
                      fmt: CallFormat | None) -> tuple[list[dict], dict]:
    """(messages, template kwargs) to render: a template with tool support (`fmt`, its call format)
    gets `tools` and the history as it is; any other template the generic mode's rewrite, when
    tools are in play."""
    messages = _history_thinking(messages, fmt is HARMONY)
    if fmt is not None:
        listed = template_tools(tools)
        return messages, ({**template_kwargs, "tools": listed} if listed else template_kwargs)
    in_history = any(m["role"] == "tool" or m.get("tool_calls") for m in messages)
    if (tools is not None and tools.active) or in_history:
        return generic_messages(messages, tools), template_kwargs
    return messages, template_kwargs


# OpenAPI shapes (gateway/server/openapi.py renders them; parse_tools and tool_calls_of_message validate).
_FUNCTION = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS}, "description": {"type": "string"},
    "parameters": {"type": "object", "description": "a JSON schema"}, "strict": {"type": ["boolean", "null"]}}}
CALL_SHAPE = {"type": "object", "required": ["function"], "properties": {
    "id": {"type": ["string", "null"]}, "type": {"enum": ["function", None]},
    "function": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "arguments": {"type": ["string", "object"]}}}}}
TOOL_SHAPES = {
    "tools": ("functions the model may call", {"type": ["array", "null"], "maxItems": MAX_TOOLS, "items": {
        "type": "object", "required": ["function"],
        "properties": {"type": {"const": "function"}, "function": _FUNCTION}}}),
    "tool_choice": ("none, auto (default), required, or one named function", {"anyOf": [
        {"type": "null"}, {"enum": list(TOOL_CHOICES)},
        {"type": "object", "required": ["type", "function"], "properties": {
            "type": {"const": "function"},
            "function": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}]}),
    "parallel_tool_calls": ("allow several calls in one answer (default false)", {"type": ["boolean", "null"]}),
}
