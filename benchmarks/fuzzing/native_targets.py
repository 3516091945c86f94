"""Fuzz targets of the native parsers: GGUF reader (+ the tokenizer tables read from it), both
tokenizers, the incremental UTF-8 detokenizer, the ring's REQUEST decoder, the JSON escaper and the
delta relay's framing.

Refusals are ValueError (pybind11's value_error / std::invalid_argument) or, for tokenizer ids,
IndexError; anything else — another exception type, a crash, a sanitizer report — is a finding.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile

from benchmarks.fuzzing.target import Target

GGUF_REFUSALS = (ValueError,)


def _fdp(data: bytes):
    import atheris

    return atheris.FuzzedDataProvider(data)


# --- GGUF --------------------------------------------------------------------------------------

def _gguf_setup():
    # tmpfs: one write + open per input; the reader takes a path (it maps the file). The file is
    # unlinked at once and reached through /proc/self/fd (libFuzzer ends with _exit: no cleanup).
    fd, path = tempfile.mkstemp(prefix="laneserve-fuzz-", suffix=".gguf", dir="/dev/shm")
    os.unlink(path)
    return f"/proc/self/fd/{fd}"


def _gguf_one(path: str, data: bytes) -> None:
    import lanes._runtime as rt

    fd = int(path.rsplit("/", 1)[1])
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    try:
        g = rt.GgufFile(path)
    except GGUF_REFUSALS:
        return
    for key in g.keys():
        g.get(key, None)
    for t in g.tensors():
        try:
            g.tensor_bytes(t["name"] if isinstance(t, dict) else t[0])
        except GGUF_REFUSALS:
            pass
    try:  # the tokenizer tables of a hostile file (vocab, merges, scores, token types)
        tok = rt.Tokenizer(path, keep_text_index=False)
    except GGUF_REFUSALS:
        return
    ids = tok.encode(b"Hello world \xc3\xa9 <|im_start|>", True, True)
    tok.decode(ids, True)


def _gguf_seeds():
    import gguf
    import numpy as np

    import lanes

    buf = tempfile.NamedTemporaryFile(suffix=".gguf", delete=False)
    buf.close()
    w = gguf.GGUFWriter(buf.name, "llama")
    for add, key, value in [(w.add_uint32, "a.u32", 7), (w.add_int64, "a.i64", -3), (w.add_float32, "a.f32", 1.5),
                            (w.add_bool, "a.b", True), (w.add_string, "a.s", "héllo")]:
        add(key, value)
    w.add_array("a.arr", [1, 2, 3])
    w.add_array("a.sarr", ["x", "yz", ""])
    w.add_tensor("w", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.add_tensor("h", np.ones((4, 32), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(buf.name, "rb") as f:
        yield f.read()
    os.unlink(buf.name)
    # The header + metadata of the real models (vocabularies, merges, templates): the first
    # 64 KiB, so the tensor table is cut short (tests the bounds) while the seed stays small.
    for path in (lanes.smollm2_path(), lanes.gemma3_path()):
        with open(path, "rb") as f:
            yield f.read(64 * 1024)


# --- tokenizers ---------------------------------------------------------------------------------

def _tok_setup(which: str):
    def setup():
        import lanes
        import lanes._runtime as rt

        path = lanes.smollm2_path() if which == "smollm2" else lanes.gemma3_path()
        return rt.Tokenizer(str(path), keep_text_index=False)
    return setup


def _tok_one(tok, data: bytes) -> None:
    import lanes._runtime as rt

    fdp = _fdp(data)
    mode = fdp.ConsumeIntInRange(0, 3)
    if mode == 0:  # arbitrary bytes, with and without special-token parsing
        text = fdp.ConsumeBytes(fdp.remaining_bytes())
        ids = tok.encode(text, True, True)
        tok.encode(text, False, False)
        tok.decode(ids, True)
    elif mode == 1:  # arbitrary unicode. No round-trip check: a vocabulary may lack a byte's
        # token (SmolLM2 has none for 0xF1), and then llama.cpp drops the byte and so do we.
        text = fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes())
        tok.decode(tok.encode(text, False, False), False)
    else:  # arbitrary id lists (out of range ids are refused), pieces through the UTF-8 stream
        n = fdp.ConsumeIntInRange(0, 64)
        ids = [fdp.ConsumeIntInRange(-2, tok.n_vocab + 2) for _ in range(n)]
        try:
            whole = tok.decode(ids, mode == 3)
        except (IndexError, ValueError):
            return
        stream = rt.Utf8Stream()
        out = "".join(stream.push(tok.piece(i, mode == 3)) for i in ids) + stream.finish()
        if out != whole.decode("utf-8", "replace"):
            raise AssertionError(f"stream {out!r} != decode {whole!r}")


def _tok_seeds():
    from pathlib import Path

    golden = Path(__file__).resolve().parents[2] / "tests" / "data" / "golden"
    for jsonl in sorted(golden.glob("*/dev/tokenize.jsonl"))[:2]:
        for line in jsonl.read_text(encoding="utf-8").splitlines()[:200]:
            entry = json.loads(line)
            text = entry.get("text") if isinstance(entry, dict) else None
            if isinstance(text, str):
                yield b"\x00" + text.encode("utf-8")
                yield b"\x01" + text.encode("utf-8")
    yield b"\x00" + b"bad \xff\xfe utf8 \xc3 <|im_start|>user\n<start_of_turn>"
    yield b"\x02" + bytes(range(256))
    yield b"\x03" + bytes(range(255, -1, -1))


def _utf8_one(_state, data: bytes) -> None:
    import lanes._runtime as rt

    fdp = _fdp(data)
    stream = rt.Utf8Stream()
    pieces, out = [], []
    while fdp.remaining_bytes():
        piece = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 8))
        pieces.append(piece)
        out.append(stream.push(piece))
    out.append(stream.finish())
    whole = b"".join(pieces)
    # The stream emits what a one-shot lenient decode emits, piece boundaries notwithstanding.
    if "".join(out) != whole.decode("utf-8", "replace"):
        raise AssertionError(f"{pieces!r}: {''.join(out)!r} != {whole.decode('utf-8', 'replace')!r}")


def _utf8_seeds():
    yield "héllo wörld 😀 中文".encode()
    yield b"\x03\xf0\x9f\x98\x01\x80\x02\xed\xa0\x80\xc0\xaf"


# --- ring wire ----------------------------------------------------------------------------------

def _wire_one(_state, data: bytes) -> None:
    from lanes import _ring

    for decode in (_ring.decode_request, _ring.decode_load_adapter):
        try:
            decode(data)
        except ValueError:
            pass


def _wire_seeds():
    from lanes import wire
    from lanes.api import GenerationParams, ReasoningMarkers

    full = GenerationParams(max_tokens=17, temperature=0.5, seed=5, stop=("\n\n", "é stop"),
                            logit_bias=((5, -100.0), (7, 2.5)), min_tokens=3, ignore_eos=True,
                            reasoning=ReasoningMarkers("<think>", "</think>", True), grammar='{"grammars": []}',
                            logprobs=3, prompt_logprobs=True, lora=((1, 0.5),))
    yield wire.encode_request(99, [1, 2, 49151], full, 2)
    yield wire.encode_request(1, [3], GenerationParams(max_tokens=1), 1)
    yield wire.encode_embed_request(42, [[1, 2, 3], [49151], [7, 7]])
    yield wire.encode_load_adapter(3, "name", "/tmp/adapter.gguf")


# --- JSON escaper and delta relay framing ---------------------------------------------------------

class _Relay:
    """One ring segment, a writer, a reader with a direct route, a queued and a collected route."""

    def __init__(self):
        import posix_ipc

        from lanes import _ring

        self.name = f"/laneserve-fuzz-{os.getpid()}"
        size = _ring.segment_bytes_for(1 << 16)
        shm = posix_ipc.SharedMemory(self.name, posix_ipc.O_CREAT, size=size)
        self.fd = os.dup(shm.fd)
        shm.close_fd()
        posix_ipc.unlink_shared_memory(self.name)  # the fds keep it alive; nothing left in /dev/shm
        _ring.format_segment(self.fd, size)
        self.writer = _ring.RingWriter(self.fd, size)
        self.reader = _ring.RingReader(self.fd, size)
        self.a, self.b = socket.socketpair()
        self.a.setblocking(False)
        self.b.setblocking(False)


SSE = (b'data: {"t":"', b'"}\n\n')


def _dechunk(data: bytes) -> bytes:
    out, pos = [], 0
    while pos < len(data):
        eol = data.index(b"\r\n", pos)
        size = int(data[pos:eol], 16)
        if size == 0 or data[eol + 2 + size:eol + 4 + size] != b"\r\n":
            raise AssertionError(f"bad chunk framing at {pos}: {data[pos:pos + 40]!r}")
        out.append(data[eol + 2:eol + 2 + size])
        pos = eol + 4 + size
    return b"".join(out)


def _relay_one(relay: _Relay, data: bytes) -> None:
    from lanes import _ring, wire

    escaped = _ring.json_escape(data)
    expected = data.decode("utf-8", "replace").replace("\ufffd", "")
    if json.loads(b'"' + escaped + b'"').replace("\ufffd", "") != expected:
        raise AssertionError(f"json_escape({data!r}) = {escaped!r}")
    r, w = relay.reader, relay.writer
    r.add_route(1, 1, [(0, wire.CONTENT, *SSE)])
    r.set_socket(1, relay.a.fileno())
    r.set_direct(1, True)
    r.add_route(2, 1, [(0, wire.CONTENT, *SSE)])
    r.add_route(3, 1, [], collect=True)
    # Routes 1, 2: the hostile bytes as they are, cut anywhere (framing must stay valid JSON).
    # Route 3: text as a lane sends it — whole UTF-8 characters per record (csrc/tokenizer
    # utf8_stream) — which the collected text must reproduce exactly.
    raw = [data[i:i + 7] for i in range(0, len(data), 7)] or [b""]
    valid_text = data.decode("utf-8", "replace")
    valid = [valid_text[i:i + 3].encode() for i in range(0, len(valid_text), 3)] or [b""]
    for rid, pieces in ((1, raw), (2, raw), (3, valid)):
        for p in pieces:
            if not w.write(wire.DELTA, _ring.encode_delta_header(rid, 0, wire.CONTENT, 1, 0) + p):
                raise AssertionError("ring full")
    queued = []
    while True:
        q, _, _, more = r.pump(128)
        queued += q or []
        if not more:
            break
    direct = b""
    while True:
        try:
            chunk = relay.b.recv(1 << 20)
        except BlockingIOError:
            break
        direct += chunk
    texts = {"direct": _dechunk(direct), "queued": b"".join(e for _, _, e in queued)}
    for name, events in texts.items():
        for event in events.split(b"\n\n")[:-1]:
            if not event.startswith(b"data: ") or b"\n" in event or b"\r" in event:
                raise AssertionError(f"{name}: bad SSE event {event!r}")
            json.loads(event[len(b"data: "):])
    collected = r.take_text(3, 0)
    if json.loads(b'"' + collected + b'"') != valid_text:
        raise AssertionError(f"collected {collected!r} != {valid_text!r}")
    for rid in (1, 2, 3):
        r.remove_route(rid)


def _relay_seeds():
    yield b"hello"
    yield b'quote " backslash \\ newline \n tab \t nul \x00 del \x7f'
    yield "\u2028\u2029 é 😀".encode()
    yield b"bad \xff\xfe utf8 \xc3"
    yield b"\xed\xa0\x80 surrogate, \xc0\xaf overlong"
    yield b"</script><script>alert(1)</script>"


TARGETS = {
    "gguf": Target(_gguf_setup, _gguf_one, _gguf_seeds, "GGUF header, metadata, tensor table and bounds, tokenizer tables"),
    "tokenizer_bpe": Target(_tok_setup("smollm2"), _tok_one, _tok_seeds, "SmolLM2 byte-level BPE encode/decode"),
    "tokenizer_spm": Target(_tok_setup("gemma3"), _tok_one, _tok_seeds, "Gemma 3 SPM encode/decode"),
    "utf8_stream": Target(lambda: None, _utf8_one, _utf8_seeds, "incremental UTF-8 detokenizer"),
    "wire": Target(lambda: None, _wire_one, _wire_seeds, "ring REQUEST / LOAD_ADAPTER decoder"),
    "relay": Target(_Relay, _relay_one, _relay_seeds, "JSON escaper and delta relay framing (direct, queued, collect)"),
}
