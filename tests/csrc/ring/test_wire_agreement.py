"""csrc/ring/wire.h and lanes/wire.py agree: lanes/wire.py builds its constants and struct formats
from the layout the _ring extension exports; the packed formats reproduce the native sizes and
offsets, and records encoded on one side decode identically on the other."""
import dataclasses
import json
import random
import struct

import numpy as np
import pytest

from lanes import _ring, wire
from lanes.api import GenerationParams, PromptImage, ReasoningMarkers

LAYOUT = _ring.wire_layout()


def test_constants_agree():
    assert LAYOUT["magic"] == wire.MAGIC
    assert LAYOUT["version"] == wire.VERSION
    assert LAYOUT["record_header_bytes"] == wire.RECORD_HEADER_BYTES
    assert LAYOUT["record_align_bytes"] == wire.RECORD_ALIGN_BYTES
    assert LAYOUT["record_types"] == wire.RECORD_TYPES
    assert LAYOUT["finish_codes"] == wire.FINISH_CODES
    assert LAYOUT["error_codes"] == wire.ERROR_CODES
    assert LAYOUT["flags"] == wire.FLAGS
    assert LAYOUT["channels"] == wire.CHANNELS
    assert LAYOUT["step_buckets"] == wire.STEP_BUCKETS
    assert tuple(LAYOUT["step_time_bounds_ns"]) == wire.STEP_TIME_BOUNDS_NS
    assert tuple(LAYOUT["batch_token_bounds"]) == wire.BATCH_TOKEN_BOUNDS
    assert LAYOUT["max_choices"] == wire.MAX_CHOICES == 128


def test_module_constants_are_the_exported_values():
    for name, value in {**LAYOUT["record_types"], **LAYOUT["flags"]}.items():
        assert getattr(wire, name) == value, name
    assert (wire.PAD, wire.REQUEST, wire.DELTA, wire.DONE) == (0, 1, 17, 18)
    assert wire.CONTENT == wire.CHANNELS["content"] == 0


@pytest.mark.parametrize("spec", wire.STRUCTS, ids=lambda s: s.name)
def test_struct_layouts_agree(spec):
    native = LAYOUT["structs"][spec.name]
    assert native["size"] == spec.size
    assert native["offsets"] == spec.offsets()
    assert [(name, offset) for name, offset, _, _ in native["fields"]] == list(spec.offsets().items())


@pytest.mark.parametrize("spec", wire.STRUCTS, ids=lambda s: s.name)
def test_struct_codecs_round_trip(spec):
    values = {}
    for i, (name, code) in enumerate(spec.fields):
        one = (lambda k: 0.5 * k) if code[-1] == "f" else (lambda k: 3 * k + 1)
        values[name] = tuple(one(i + j) for j in range(int(code[:-1]))) if len(code) > 1 else one(i)
    packed = spec.pack(**values)
    assert len(packed) == LAYOUT["structs"][spec.name]["size"]
    assert spec.unpack(packed) == values
    with pytest.raises(KeyError):
        spec.pack(**{k: v for k, v in values.items() if k != spec.fields[-1][0]})


def test_sampling_defaults_agree():
    defaults = {f.name: f.default for f in dataclasses.fields(GenerationParams)}
    native = _ring.sampling_defaults()
    assert tuple(native) == wire.SAMPLING_SCALARS  # wire order
    for name, value in native.items():
        assert defaults[name] == pytest.approx(value), name


def test_segment_header_agrees():
    native = LAYOUT["structs"]["SegmentHeader"]
    assert native["size"] == wire.SEGMENT_HEADER_BYTES
    assert native["offsets"] == wire.SEGMENT_HEADER_OFFSETS
    # producer and consumer positions on separate 128-byte lines
    offs = wire.SEGMENT_HEADER_OFFSETS
    assert len({offs["tail"] // 128, offs["head"] // 128, offs["reader_waiting"] // 128}) == 3


def test_request_encoded_in_python_decodes_in_cpp():
    params = GenerationParams(max_tokens=17, temperature=0.5, top_p=0.9, top_k=40, min_p=0.05, seed=2**63 + 5,
                              stop=("\n\n", "é stop"), presence_penalty=0.25, frequency_penalty=-0.5,
                              repetition_penalty=1.125, logit_bias=((5, -100.0), (7, 2.5)), min_tokens=3,
                              ignore_eos=True)
    payload = wire.encode_request(99, [1, 2, 49151], params, 2)
    d = _ring.decode_request(payload)
    assert d["request_id"] == 99 and d["max_tokens"] == 17
    assert d["temperature"] == 0.5 and d["top_k"] == 40 and d["seed"] == 2**63 + 5
    assert abs(d["top_p"] - 0.9) < 1e-7 and abs(d["min_p"] - 0.05) < 1e-7
    assert (d["presence_penalty"], d["frequency_penalty"], d["repetition_penalty"]) == (0.25, -0.5, 1.125)
    assert d["logit_bias"] == [(5, -100.0), (7, 2.5)]
    assert d["min_tokens"] == 3 and d["ignore_eos"] is True
    assert d["prompt_ids"] == [1, 2, 49151]
    assert d["stop"] == [b"\n\n", "é stop".encode()]
    assert d["num_choices"] == 2
    unseeded = _ring.decode_request(wire.encode_request(1, [3], GenerationParams(max_tokens=1), 1))
    assert unseeded["seed"] is None and unseeded["ignore_eos"] is False and unseeded["reasoning"] is None


@pytest.mark.parametrize("starts_inside", [False, True])
def test_reasoning_markers_follow_the_stop_strings(starts_inside):
    params = GenerationParams(max_tokens=3, stop=("x",), reasoning=ReasoningMarkers("<think>", "</think>", starts_inside))
    d = _ring.decode_request(wire.encode_request(2, [1], params, 1))
    assert d["stop"] == [b"x"] and d["reasoning"] == (b"<think>", b"</think>", starts_inside)
    no_open = GenerationParams(max_tokens=3, reasoning=ReasoningMarkers("", "</think>", True))
    assert _ring.decode_request(wire.encode_request(3, [1], no_open, 1))["reasoning"] == (b"", b"</think>", True)


@pytest.mark.parametrize("as_content", [False, True])
@pytest.mark.parametrize("calls", [False, True])
def test_harmony_reasoning_is_flags_without_markers(as_content, calls):
    params = GenerationParams(max_tokens=3, stop=("x",), reasoning=ReasoningMarkers("", "", harmony=True,
                                                                                     as_content=as_content, calls=calls))
    payload = wire.encode_request(2, [1], params, 1)
    d = _ring.decode_request(payload)
    assert d["stop"] == [b"x"] and d["reasoning"] == (b"", b"", False) and d["harmony"] == (True, as_content, calls)
    assert _ring.decode_request(wire.encode_request(2, [1], GenerationParams(max_tokens=3), 1))["harmony"] == \
        (False, False, False)
    both = GenerationParams(max_tokens=3, reasoning=ReasoningMarkers("<think>", "</think>"))
    raw = bytearray(wire.encode_request(2, [1], both, 1))
    flags_at = wire.REQUEST_HEADER.offsets()["flags"]
    flags = int.from_bytes(raw[flags_at:flags_at + 4], "little") | wire.REQUEST_REASONING_HARMONY
    raw[flags_at:flags_at + 4] = flags.to_bytes(4, "little")
    with pytest.raises(ValueError, match="harmony"):
        _ring.decode_request(bytes(raw))


def test_request_without_prompt_ids_decodes():
    """Found by the wire fuzzer under UBSan (.ci/sanitize): zero prompt ids made the decoder
    memcpy into an empty vector's null data() — undefined behaviour, now skipped."""
    d = _ring.decode_request(wire.encode_request(7, [], GenerationParams(max_tokens=1), 1))
    assert d["request_id"] == 7 and d["prompt_ids"] == []


def test_embed_request_encoded_in_python_decodes_in_cpp():
    payload = wire.encode_embed_request(42, [[1, 2, 3], [49151], [7, 7]])
    d = _ring.decode_request(payload)
    assert d["request_id"] == 42 and d["embed"] is True and d["num_choices"] == 3
    assert d["prompt_ids"] == [1, 2, 3, 49151, 7, 7] and d["prompt_lengths"] == [3, 1, 2]
    assert d["stop"] == [] and d["logit_bias"] == [] and d["seed"] is None
    plain = _ring.decode_request(wire.encode_request(1, [3], GenerationParams(max_tokens=1), 1))
    assert plain["embed"] is False and plain["prompt_lengths"] == []


def test_bad_embed_requests_are_rejected():
    payload = wire.encode_embed_request(5, [[1, 2], [3]])
    with pytest.raises(ValueError, match="truncated"):
        _ring.decode_request(payload[:-4])  # the lengths section cut off
    lengths_at = len(payload) - 8
    zero = payload[:lengths_at] + struct.pack("<II", 3, 0)
    with pytest.raises(ValueError, match="0 tokens"):
        _ring.decode_request(zero)
    wrong_sum = payload[:lengths_at] + struct.pack("<II", 1, 1)
    with pytest.raises(ValueError, match="sum"):
        _ring.decode_request(wrong_sum)
    for bad in ([], [[]], [[1]] * (wire.MAX_CHOICES + 1)):
        with pytest.raises(ValueError):
            wire.encode_embed_request(1, bad)


def test_truncated_request_is_rejected():
    payload = wire.encode_request(5, [1, 2, 3], GenerationParams(max_tokens=4), 1)
    for cut in (0, 10, len(payload) - 1):
        with pytest.raises(ValueError, match="truncated|exceed"):
            _ring.decode_request(payload[:cut])
    with pytest.raises(ValueError, match="trailing"):
        _ring.decode_request(payload + b"x")


def test_output_records_encoded_in_cpp_decode_in_python():
    hello = wire.decode_hello(_ring.encode_hello(1234, 4096, 49152, 777, 2**33, 8, 256, 576))
    assert hello == wire.Hello(1234, 4096, 49152, wire.VERSION, 777, 2**33, 8, 256, 576)
    vector = [0.5, -0.25, 2.0**-100, -3.0]  # exact in float32
    rid, choice, prompt_tokens, data = wire.decode_embedding(_ring.encode_embedding(2**50, 7, 13, vector))
    assert (rid, choice, prompt_tokens) == (2**50, 7, 13)
    assert struct.unpack("<4f", data) == tuple(vector)
    with pytest.raises(ValueError, match="truncated"):
        wire.decode_embedding(_ring.encode_embedding(1, 0, 1, vector)[:-1])
    done = wire.decode_done(_ring.encode_done(2**40, 3, 2, 11, 22, 5, wire.DONE_LAST_CHOICE, 333, 444, 2))
    assert done == (2**40, 3, 2, 11, 22, 5, 1, 333, 444, 2, 0)
    assert wire.decode_delta_header(_ring.encode_delta_header(9, 1, 2, 4, 55)) == (9, 1, 2, 4, 0, 55)
    rid, code, msg = wire.decode_error(_ring.encode_error_header(8, 2) + "bad ✓".encode())
    assert (rid, code, msg) == (8, "bad_request", "bad ✓")


def test_stats_record_encoded_in_cpp_decodes_in_python():
    values = dict(num_steps=2**40 + 1, active_sequences=3, waiting_sequences=4, prompt_cache_bytes=2**33 + 5,
                  prompt_cache_budget_bytes=2**34, prompt_cache_entries=7, prompt_cache_hits=2**35 + 9,
                  prompt_cache_hit_tokens=2**36 + 11, prompt_cache_stores=2**37 + 13,
                  prompt_cache_evictions=2**38 + 15)
    stats = wire.decode_stats(_ring.encode_stats(**values))
    assert {name: getattr(stats, name) for name in values} == values
    assert stats.step_ns_sum == 0 and stats.step_ns_buckets == (0,) * wire.STEP_BUCKETS


@pytest.mark.parametrize("prompt", [False, True])
def test_logprobs_request_fields_decode_in_cpp(prompt):
    params = GenerationParams(max_tokens=0 if prompt else 5, stop=("x",), logprobs=7, prompt_logprobs=prompt,
                              reasoning=ReasoningMarkers("<think>", "</think>"))
    d = _ring.decode_request(wire.encode_request(4, [1, 2], params, 1))
    assert d["num_top_logprobs"] == 7 and d["prompt_logprobs"] is prompt and d["max_tokens"] == params.max_tokens
    assert d["stop"] == [b"x"] and d["reasoning"] == (b"<think>", b"</think>", False)
    plain = _ring.decode_request(wire.encode_request(1, [3], GenerationParams(max_tokens=1), 1))
    assert plain["num_top_logprobs"] == -1 and plain["prompt_logprobs"] is False
    zero = _ring.decode_request(wire.encode_request(1, [3], GenerationParams(max_tokens=1, logprobs=0), 1))
    assert zero["num_top_logprobs"] == 0


def test_bad_logprobs_requests_are_rejected():
    payload = bytearray(wire.encode_request(1, [3], GenerationParams(max_tokens=1, logprobs=2), 1))
    with pytest.raises(ValueError, match="truncated"):
        _ring.decode_request(bytes(payload[:-4]))
    struct.pack_into("<I", payload, len(payload) - 4, 21)
    with pytest.raises(ValueError, match="above 20"):
        _ring.decode_request(bytes(payload))
    for bad in (dict(max_tokens=0), dict(max_tokens=1, logprobs=21), dict(max_tokens=1, prompt_logprobs=True)):
        with pytest.raises(ValueError):
            GenerationParams(**bad)


def test_logprobs_record_encoded_in_cpp_decodes_in_python():
    nan = float("nan")
    entries = [(5, nan), (-1, nan), (-1, nan),       # prompt position 0: no value
               (9, -0.5), (9, -0.5), (4, -1.25),    # prompt position 1
               (2, -2.0), (3, -0.25), (-1, nan)]    # a generated token, one alternative only
    payload = _ring.encode_logprobs(2**40, 3, 2, 2, entries, "é".encode(), b"r")
    rid, choice, positions, num_prompt, content, reasoning = wire.decode_logprobs(payload)
    assert (rid, choice, num_prompt, content, reasoning) == (2**40, 3, 2, "é".encode(), b"r")
    assert positions == (((5, None), ()), ((9, -0.5), ((9, -0.5), (4, -1.25))), ((2, -2.0), ((3, -0.25),)))
    with pytest.raises(ValueError, match="truncated"):
        wire.decode_logprobs(payload[:-1])


def _random_text(rng: random.Random) -> str:
    pool = ['"', "\\", "\n", "\r", "\t", "\b", "\f", "\x00", "\x1f", "\x7f", "a", "é", "€", "\u2028", "\u2029",
            "😀", "\ufeff", "/", "'"]
    return "".join(rng.choice(pool) for _ in range(rng.randrange(0, 40)))


def test_json_escape_always_yields_valid_json_string_content():
    rng = random.Random(7)
    for _ in range(2000):
        text = _random_text(rng)
        escaped = _ring.json_escape(text.encode())
        assert json.loads(b'"' + escaped + b'"') == text
        assert b"\xe2\x80\xa8" not in escaped and b"\xe2\x80\xa9" not in escaped
        assert all(b >= 0x20 for b in escaped)


def test_json_escape_replaces_invalid_utf8():
    for bad in (b"\xff", b"a\xc3", b"\xed\xa0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80"):
        out = _ring.json_escape(bad)
        json.loads(b'"' + out + b'"')  # valid JSON whatever the input
        assert b"\\ufffd" in out


def test_audio_records_agree():
    assert LAYOUT["transcript_kinds"] == wire.TRANSCRIPT_KINDS
    from lanes.audio.records import AudioJob, encode_audio_request

    payload = encode_audio_request(AudioJob(3, "seg", 16000, translate=True, language="fr", prompt="p"))
    offsets = wire.AUDIO_REQUEST_HEADER.offsets()
    assert struct.unpack_from("<Q", payload, offsets["num_samples"])[0] == 16000
    assert struct.unpack_from("<I", payload, offsets["flags"])[0] == wire.AUDIO_TRANSLATE


def test_request_adapters_and_adapter_records_agree():
    params = GenerationParams(max_tokens=3, grammar='{"x": 1}', lora=((7, 0.5), (2**32 - 1, -1.25)))
    d = _ring.decode_request(wire.encode_request(5, [1, 2], params, 1))
    assert d["adapters"] == [(7, 0.5), (2**32 - 1, -1.25)]
    assert _ring.decode_request(wire.encode_request(5, [1], GenerationParams(max_tokens=1), 1))["adapters"] == []
    assert _ring.decode_load_adapter(wire.encode_load_adapter(9, "tuned", "/x/ä.gguf")) == (
        9, b"tuned", "/x/ä.gguf".encode())
    with pytest.raises(ValueError):
        _ring.decode_load_adapter(wire.encode_load_adapter(9, "tuned", "/x.gguf")[:-1])
    status = wire.ADAPTER_STATUS_HEADER.pack(adapter_id=3, status=wire.ADAPTER_STATUSES["failed"], tensor_bytes=0,
                                             load_ns=0) + "bad file".encode()
    assert wire.decode_adapter_status(status) == (3, "failed", 0, 0, "bad file")
    with pytest.raises(ValueError):
        GenerationParams(max_tokens=1, lora=((1, 1.0), (1, 0.5)))


def test_request_images_follow_the_adapters():
    a = (np.arange(6, dtype=np.float32) / 4).reshape(2, 3)
    b = -np.ones((1, 3), dtype=np.float32)
    params = GenerationParams(max_tokens=1, lora=((7, 0.5),),
                              images=(PromptImage(1, a, True, 2**64 - 1), PromptImage(4, b, False, 5)))
    payload = wire.encode_request(5, [1, 0, 0, 2, 0, 3], params, 1)
    d = _ring.decode_request(payload)
    assert d["adapters"] == [(7, 0.5)]
    assert d["images"] == [(1, 2, 3, True, 2**64 - 1, list(a.ravel())), (4, 1, 3, False, 5, list(b.ravel()))]
    assert _ring.decode_request(wire.encode_request(5, [1], GenerationParams(max_tokens=1), 1))["images"] == []
    with pytest.raises(ValueError, match="truncated"):
        _ring.decode_request(payload[:-4])
