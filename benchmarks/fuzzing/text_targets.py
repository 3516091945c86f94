"""Fuzz targets of the gateway's text features and uploads: the native reasoning splitter, the
tool-call parser, chat templates from a (hostile) GGUF in the sandbox, the grammar bridge
(compile through llguidance, then mask and consume) and the audio upload (multipart + decode).

A refusal the API documents (APIError → 4xx, a template syntax error → the model is not served,
AudioDecodeError/AudioTooLong) is fine; any other exception, a crash or a hang is a finding.
"""
from __future__ import annotations

from pathlib import Path

from benchmarks.fuzzing.target import Target

ROOT = Path(__file__).resolve().parents[2]


def _fdp(data: bytes):
    import atheris

    return atheris.FuzzedDataProvider(data)


def _split(fdp, max_pieces: int = 16) -> list[str]:
    text = fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes())
    cuts = sorted({(i * 7919) % (len(text) + 1) for i in range(min(max_pieces, len(text)))})
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


# --- reasoning splitter and tool-call parser -----------------------------------------------------

def _reasoning_one(_state, data: bytes) -> None:
    import lanes._runtime as rt

    fdp = _fdp(data)
    open_, close = ("<think>", "</think>") if fdp.ConsumeBool() else ("", "</think>")
    starts_inside = fdp.ConsumeBool() or not open_
    pieces = _split(fdp)
    s = rt.ReasoningSplitter(open_, close, starts_inside)
    content, reasoning = [], []
    for p in pieces + [None]:
        c, r = s.push(p) if p is not None else s.flush()
        content.append(c)
        reasoning.append(r)
    whole = "".join(pieces)
    # Nothing is lost or invented: every character is content, reasoning or one of the markers.
    if sum(map(len, content)) + sum(map(len, reasoning)) > len(whole):
        raise AssertionError(f"split {pieces!r} into more text than it had")


def _tools_one(_state, data: bytes) -> None:
    from gateway.features.tools import HERMES, LLAMA3
    from gateway.features.tool_calls import ToolCallParser

    fdp = _fdp(data)
    fmt = HERMES if fdp.ConsumeBool() else LLAMA3
    parser = ToolCallParser(fmt)
    events = []
    for p in _split(fdp):
        try:
            events += parser.feed(p)
        except ValueError:  # json.JSONDecodeError of a call head: see the regression test
            raise
    events += parser.finish()


def _text_seeds():
    yield b"\x01\x00<think>let me see</think>The answer is 4."
    yield b"\x00\x01still thinking</think>done"
    yield b'\x01<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris \\"x\\" {"}}\n</tool_call> tail'
    yield b'\x00{"name": "f", "parameters": {"a": [1, {"b": "}"}]}}'
    yield b"\x01<tool_call>\n{\"name\": 5, \"arguments\": []}\n</tool_call><tool_ca"


# --- chat templates --------------------------------------------------------------------------------

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello", "tool_calls": [
                {"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
            {"role": "tool", "content": "42"}, {"role": "user", "content": "and?"}]
TOOLS = [{"type": "function", "function": {"name": "f", "description": "d",
                                           "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]


def _template_one(_state, data: bytes) -> None:
    import jinja2

    from gateway.http.errors import APIError
    from gateway.text.chat_template import ChatTemplate

    source = data.decode("utf-8", "replace")
    try:
        t = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    except jinja2.TemplateError:  # a broken model file: the model gets no chat route
        return
    try:
        t.render(MESSAGES, {"tools": TOOLS, "enable_thinking": True})
    except APIError:
        pass


def _template_seeds():
    yield (ROOT / "tests" / "data" / "templates" / "qwen3-0.6b.jinja").read_bytes()
    from gateway.text.chat_template import GEMMA3_TEMPLATE

    yield GEMMA3_TEMPLATE.encode()
    yield b"{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m['content'] | trim }}<|im_end|>\n{% endfor %}"
    yield b"{{ ''.__class__.__mro__ }}{{ cycler.__init__.__globals__ }}{{ range(10) | list | tojson }}"
    yield b"{% macro r(n) %}{{ r(n) }}{% endmacro %}{{ r(1) }}"
    yield b"{% for i in range(99) %}{% for j in range(99) %}{{ i * j }}{% endfor %}{% endfor %}{{ 'ab' * 3 }}"
    # sizes (gateway/text/template_bounds.py): format widths, padding, joins, doubling, macros
    yield b'{{ "{:>9}|{:.3f}".format(messages[0].content, 1.5) }}{{ "%-9s|%*d" % ("a", 4, 2) }}{{ "%5d"|format(3) }}'
    yield b"{{ 'x'|center(9) }}{{ 'a\nb'|indent(4) }}{{ 'a b c'|wordwrap(2) }}{{ messages|map(attribute='role')|join('::') }}"
    yield b"{% set ns = namespace(s='x', n=3) %}{% for i in range(9) %}{% set ns.s = ns.s ~ ns.s + ns.s %}" \
          b"{% set ns.n = ns.n * ns.n %}{% endfor %}{{ ns.s|length }}{{ messages|tojson(indent=2) }}"
    yield b"{% macro d(n) %}{% if n %}{{ d(n - 1) }}{{ d(n - 1) }}{% endif %}{% endmacro %}{{ d(9) }}" \
          b"{{ 'abc'.replace('', '-').ljust(9).zfill(12) }}{{ [1, 2]|batch(3, 0)|list }}{{ [1, 2]|slice(3)|list }}"


# --- grammar bridge ---------------------------------------------------------------------------------

KINDS = ("json_schema", "regex", "lark", "grammar")


class _Tokens:
    """The SmolLM2 vocabulary as llguidance's TokenizerWrapper wants it (piece bytes + encode)."""

    def __init__(self):
        import lanes
        import lanes._runtime as rt

        self.tok = rt.Tokenizer(str(lanes.smollm2_path()))
        self.tokens = [self.tok.piece(i, True) for i in range(self.tok.n_vocab)]
        self.eos_token_id = self.tok.eos_id
        self.bos_token_id = self.tok.bos_id

    def __call__(self, text):
        return self.tok.encode(text, False, False)


def _grammar_setup():
    import llguidance

    tokens = _Tokens()
    return tokens, llguidance.LLTokenizer(llguidance.TokenizerWrapper(tokens))


def _grammar_one(state, data: bytes) -> None:
    import llguidance

    from gateway.features.structured import compile_grammar
    from gateway.http.errors import APIError

    tokens, lltok = state
    fdp = _fdp(data)
    kind = KINDS[fdp.ConsumeIntInRange(0, len(KINDS) - 1)]
    text = fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes())
    try:
        grammar = compile_grammar(kind, text, "fuzz")
    except APIError:
        return
    matcher = llguidance.LLMatcher(lltok, grammar)
    for token in tokens("{\"a\": 1} yes 123"):
        if matcher.is_error() or matcher.is_stopped():
            break
        matcher.compute_logit_bias()
        matcher.consume_token(token)


def _grammar_seeds():
    import json

    yield b"\x00" + json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}).encode()
    yield b"\x00" + json.dumps({"type": "array", "items": {"enum": ["x", 1, None]}, "minItems": 2}).encode()
    yield b"\x00" + json.dumps({"$defs": {"n": {"anyOf": [{"type": "string", "pattern": "^a+$"}, {"$ref": "#/$defs/n"}]}},
                                "$ref": "#/$defs/n"}).encode()
    yield b"\x01(Yes|No)\\. [A-Za-z ]{4,40}\\."
    yield b'\x02start: "meow" ("!" | "?")'
    yield b'\x03root ::= "yes" | "no" [0-9]+'


# --- audio upload -------------------------------------------------------------------------------------

BOUNDARY = b"fuzzboundary"


def _audio_one(_state, data: bytes) -> None:
    from sanic.request.form import parse_multipart_form
    from sanic.request.parameters import RequestParameters

    from gateway.audio.decode import AudioDecodeError, AudioTooLong, decode_audio
    from gateway.audio.requests import parse_audio_form
    from gateway.http.errors import APIError

    try:
        form, files = parse_multipart_form(data, BOUNDARY)
    except Exception:  # noqa: BLE001 — exactly what Sanic's Request.get_form does: no form
        form, files = RequestParameters(), RequestParameters()
    try:
        req = parse_audio_form(form, files, lenient=False, max_audio_bytes=1 << 20)
    except APIError:
        return
    try:
        decode_audio(req.audio, max_seconds=5.0)
    except (AudioDecodeError, AudioTooLong):
        pass


def _multipart(audio: bytes, filename: str = "a.wav") -> bytes:
    parts = [b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-base\r\n',
             b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="file"; filename="' + filename.encode()
             + b'"\r\nContent-Type: application/octet-stream\r\n\r\n' + audio + b"\r\n",
             b"--" + BOUNDARY + b"--\r\n"]
    return b"".join(parts)


def _audio_seeds():
    wav = (ROOT / "tests" / "data" / "audio" / "speech_en.wav").read_bytes()
    yield _multipart(wav[:6000])
    for fmt, codec, name in (("ogg", "libvorbis", "a.ogg"), ("flac", "flac", "a.flac"), ("mp3", "libmp3lame", "a.mp3")):
        encoded = _encode_tone(fmt, codec)
        if encoded:
            yield _multipart(encoded, name)


def _encode_tone(fmt: str, codec: str) -> bytes | None:
    """0.1 s of a 440 Hz tone in `fmt`, or None when this FFmpeg lacks the encoder."""
    import io

    import av
    import numpy as np

    out = io.BytesIO()
    try:
        with av.open(out, "w", format=fmt) as container:
            stream = container.add_stream(codec, rate=16000)
            stream.layout = "mono"
            samples = (0.3 * np.sin(np.arange(1600) * 2 * np.pi * 440 / 16000)).astype(np.float32)
            frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="flt", layout="mono")
            frame.sample_rate = 16000
            for packet in stream.encode(frame):
                container.mux(packet)
            for packet in stream.encode(None):
                container.mux(packet)
    except (av.FFmpegError, ValueError):
        return None
    return out.getvalue()


TARGETS = {
    "reasoning": Target(lambda: None, _reasoning_one, _text_seeds, "native reasoning splitter"),
    "tool_calls": Target(lambda: None, _tools_one, _text_seeds, "streaming tool-call parser (Hermes, Llama 3)"),
    "chat_template": Target(lambda: None, _template_one, _template_seeds, "hostile chat templates in the sandbox"),
    "grammar": Target(_grammar_setup, _grammar_one, _grammar_seeds, "schemas/regex/Lark/GBNF → llguidance → mask"),
    "audio": Target(lambda: None, _audio_one, _audio_seeds, "multipart audio upload → PyAV decode"),
}
