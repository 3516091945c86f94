"""GGUF reader: metadata of every type, tensor table, and clear errors on broken files."""
import struct
from pathlib import Path

import numpy as np
import pytest
import gguf

import lanes
import lanes._runtime as rt


def write_small(path: Path) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 1.5)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**40))
    w.add_float64("t.f64", 2.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo")
    w.add_array("t.arr_i", [1, -2, 3])
    w.add_array("t.arr_f", [0.5, 1.5])
    w.add_array("t.arr_s", ["a", "bc", ""])
    w.add_tensor("w", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.add_tensor("h", np.ones((4, 32), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_reads_every_metadata_type_and_tensors(tmp_path):
    p = tmp_path / "m.gguf"
    write_small(p)
    f = rt.GgufFile(str(p))
    assert f.version == 3 and f.alignment == 32
    expect = {
        "t.u8": 200, "t.i8": -5, "t.u16": 65000, "t.i16": -30000, "t.u32": 4_000_000_000,
        "t.i32": -2_000_000_000, "t.f32": 1.5, "t.u64": 2**63 + 5, "t.i64": -(2**40), "t.f64": 2.25,
        "t.bool": True, "t.str": "héllo", "t.arr_i": [1, -2, 3], "t.arr_f": [0.5, 1.5], "t.arr_s": ["a", "bc", ""],
    }
    for key, value in expect.items():
        assert f.get(key) == value, key
    assert f.get("missing", 7) == 7
    tensors = {t["name"]: t for t in f.tensors()}
    assert tensors["w"]["shape"] == [32, 2] and tensors["w"]["type_name"] == "F32"
    assert tensors["h"]["shape"] == [32, 4] and tensors["h"]["type_name"] == "F16"
    assert np.array_equal(np.frombuffer(f.tensor_bytes("w"), np.float32), np.arange(64, dtype=np.float32))
    assert (f.data_offset + tensors["w"]["offset"]) % 32 == 0


def test_real_model_header_matches_known_facts():
    f = rt.GgufFile(str(lanes.smollm2_path()))
    assert f.data_offset == 1_785_664 and len(f.tensors()) == 272 and len(f.keys()) == 33
    assert f.get("general.architecture") == "llama" and f.get("tokenizer.ggml.pre") == "smollm"
    assert len(f.get("tokenizer.ggml.merges")) == 48_900


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda b: b[:10], "too small|truncated"),
        (lambda b: b"GGUX" + b[4:], "bad magic"),
        (lambda b: b[:4] + struct.pack("<I", 9) + b[8:], "unsupported GGUF version"),
        (lambda b: b[:8] + struct.pack("<Q", 2**40) + b[16:], "absurd tensor count"),
        (lambda b: b[:200], "truncated"),
        (lambda b: b[: len(b) - 100], "past the end|truncated"),
        (lambda b: b"", "too small"),
    ],
)
def test_broken_files_raise_clear_errors(tmp_path, mutate, message):
    good = tmp_path / "good.gguf"
    write_small(good)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(mutate(good.read_bytes()))
    with pytest.raises(ValueError, match=message) as info:
        rt.GgufFile(str(bad))
    assert str(bad) in str(info.value)


def test_unknown_tensor_type_and_bad_shape(tmp_path):
    good = tmp_path / "good.gguf"
    write_small(good)
    data = bytearray(good.read_bytes())
    # Patch the type of tensor "w" (F32 = 0) to an unknown id: find its info record by name.
    idx = data.index(b"\x01\x00\x00\x00\x00\x00\x00\x00w")  # u64 name length 1 + "w"
    type_at = idx + 8 + 1 + 4 + 2 * 8
    data[type_at : type_at + 4] = struct.pack("<I", 77)
    bad = tmp_path / "badtype.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="unknown ggml type 77"):
        rt.GgufFile(str(bad))
    data[type_at : type_at + 4] = struct.pack("<I", 8)  # Q8_0 with rows of 32: valid blocks
    data[idx + 13 : idx + 21] = struct.pack("<Q", 33)  # ne0 = 33 is not a multiple of 32
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="not a multiple"):
        rt.GgufFile(str(bad))


def test_undecodable_metadata_strings_read_with_replacement_characters(tmp_path):
    """Found by benchmarks/fuzz.py gguf (tests/data/fuzz/gguf): a string value that is not UTF-8
    raised UnicodeDecodeError out of get() (and so out of /api/show and the gateway's start)."""
    good = tmp_path / "good.gguf"
    write_small(good)
    data = good.read_bytes()
    assert data.count("héllo".encode()) == 1
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(data.replace("héllo".encode(), b"h\xff\xfello"))
    f = rt.GgufFile(str(bad))
    assert f.get("t.str") == "h\ufffd\ufffdllo"
    assert f.get("t.arr_s") == ["a", "bc", ""]


def test_keys_that_are_not_utf8_are_refused(tmp_path):
    """Found by benchmarks/fuzz.py gguf: a key that is not text raised UnicodeDecodeError out of
    keys(); keys and tensor names must be UTF-8 (the GGUF spec says ASCII), else a clear error."""
    good = tmp_path / "good.gguf"
    write_small(good)
    data = good.read_bytes()
    assert data.count(b"t.u16") == 1
    bad = tmp_path / "bad.gguf"
    for key in (b"t.\xff16", b"t.\xc0\xaf6", b"t\xed\xa0\x80"):  # invalid, overlong, surrogate
        bad.write_bytes(data.replace(b"t.u16", key))
        with pytest.raises(ValueError, match="metadata key 3 is not UTF-8 text"):
            rt.GgufFile(str(bad))
    bad.write_bytes(data.replace(b"t.u16", "t.é6".encode()[:5]))  # "t.é6" is 5 bytes: still valid
    assert "t.é6" in rt.GgufFile(str(bad)).keys()


def test_missing_and_non_gguf_files(tmp_path):
    with pytest.raises(ValueError, match="cannot open"):
        rt.GgufFile(str(tmp_path / "nope.gguf"))
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a model file at all" * 3)
    with pytest.raises(ValueError, match="bad magic"):
        rt.GgufFile(str(text))
