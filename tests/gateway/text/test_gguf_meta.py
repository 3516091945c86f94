"""Model metadata from GGUF files the test writes itself (no model needed), plus broken files."""
import struct

import pytest

from gateway.text.gguf_meta import read_model_meta


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, kvs, version=3):
    out = b"GGUF" + struct.pack("<IQQ", version, 0, len(kvs))
    for key, vtype, payload in kvs:
        out += _str(key) + struct.pack("<I", vtype) + payload
    out += b"\0" * (-len(out) % 32 or 32)  # the (empty) tensor data section starts aligned
    path.write_bytes(out)


def _tokens(tokens):
    return struct.pack("<IQ", 8, len(tokens)) + b"".join(_str(t) for t in tokens)


def test_reads_template_arch_context_and_special_tokens(tmp_path):
    path = tmp_path / "m.gguf"
    write_gguf(path, [
        ("general.architecture", 8, _str("llama")),
        ("llama.context_length", 4, struct.pack("<I", 2048)),
        ("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 3) + struct.pack("<3f", 0, 1, 2)),
        ("tokenizer.ggml.tokens", 9, _tokens(["<unk>", "<s>", "</s>"])),
        ("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 1)),
        ("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", 2)),
        ("tokenizer.ggml.add_bos_token", 7, struct.pack("<?", True)),
        ("tokenizer.chat_template", 8, _str("{{ messages }}")),
    ])
    meta = read_model_meta(str(path))
    assert (meta.architecture, meta.context_length, meta.bos_token, meta.eos_token) == ("llama", 2048, "<s>", "</s>")
    assert meta.chat_template == "{{ messages }}"


def test_missing_template_is_none(tmp_path):
    path = tmp_path / "m.gguf"
    write_gguf(path, [("general.architecture", 8, _str("gemma3"))])
    meta = read_model_meta(str(path))
    assert meta.chat_template is None and meta.context_length is None and meta.bos_token == ""


@pytest.mark.parametrize("data", [
    b"NOPE" + b"\0" * 20,
    b"",
    b"GGUF" + struct.pack("<IQQ", 9, 0, 0),
    b"GGUF" + struct.pack("<IQQ", 3, 0, 5),
    b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _str("k") + struct.pack("<I", 99),
    b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 40),
])
def test_broken_files_name_file_and_problem(tmp_path, data):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(ValueError) as info:
        read_model_meta(str(path))
    assert str(path) in str(info.value)


@pytest.mark.real_model
def test_real_smollm2_metadata():
    from lanes import smollm2_path

    meta = read_model_meta(str(smollm2_path()))
    assert meta.architecture == "llama" and meta.context_length == 8192
    assert meta.bos_token == "<|im_start|>" and meta.eos_token == "<|im_end|>"
    assert meta.chat_template.startswith("{% for message in messages %}")
