"""Utf8Stream: complete UTF-8 only, whole characters across splits, deterministic U+FFFD."""
import lanes._runtime as rt
from hypothesis import given, settings
from hypothesis import strategies as st

from tok_helpers import golden_entries, tokenizer_for


def split_points(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks, prev = [], 0
    for p in points + [len(data)]:
        chunks.append(data[prev:p])
        prev = p
    return chunks


def char_boundary_at_or_before(data: bytes, n: int) -> int:
    """Largest character boundary <= n in valid UTF-8 data."""
    while 0 < n < len(data) and (data[n] & 0xC0) == 0x80:
        n -= 1
    return n


@settings(max_examples=300, deadline=None)
@given(st.text(), st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_any_split_of_valid_text_reproduces_it(text, cuts):
    data = text.encode("utf-8")
    s = rt.Utf8Stream()
    emitted, pushed = "", 0
    for chunk in split_points(data, cuts):
        emitted += s.push(chunk)
        pushed += len(chunk)
        # exactly the complete characters so far: nothing partial, nothing held back needlessly
        assert emitted.encode("utf-8") == data[: char_boundary_at_or_before(data, pushed)]
    assert s.finish() == ""
    assert emitted == text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.lists(st.integers(min_value=0, max_value=1000), max_size=10))
def test_arbitrary_bytes_match_python_replace_decoding(data, cuts):
    s = rt.Utf8Stream()
    out = "".join(s.push(c) for c in split_points(data, cuts)) + s.finish()
    assert out == data.decode("utf-8", "replace")


def test_dangling_and_invalid_bytes():
    s = rt.Utf8Stream()
    assert s.push("日".encode()[:2]) == ""
    assert s.finish() == "\ufffd"
    assert s.push(b"ok") == "ok"  # finish() reset the stream
    assert s.push(b"\xff") == "\ufffd"
    assert s.push(b"\xe0\x80") == "\ufffd\ufffd"  # E0 needs A0..BF next: two maximal subparts
    assert s.push(b"\xed\xa0\x80") == "\ufffd\ufffd\ufffd"  # surrogate
    assert s.push(b"\xf0\x9f") == ""
    assert s.push(b"\x98") == ""
    assert s.push(b"\x80!") == "\U0001F600!"
    s.reset()
    assert s.push(b"\xc3") == ""
    s.reset()
    assert s.finish() == ""


def test_streaming_real_token_pieces():
    for model in ("smollm2-135m-instruct-q4_1", "gemma3-270m-q4_k_m"):
        tok = tokenizer_for(model)
        for e in golden_entries(model):
            if e["add_special"] or e["parse_special"]:
                continue
            s = rt.Utf8Stream()
            ids = tok.encode(e["text"], add_special=False, parse_special=False)
            out = "".join(s.push(tok.piece(i)) for i in ids) + s.finish()
            assert out == e["text"], (model, e["text"])
