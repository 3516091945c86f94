"""Hand cases from the golden README quirks, special-token facts, errors and synthetic vocabularies."""
import gguf
import lanes._runtime as rt
import pytest
from pair_vocab import byte_char


def pieces(tok, ids):
    return [tok.piece(i, special=True).decode("utf-8", "replace") for i in ids]


# ---- SmolLM2 (gpt2 BPE, pre smollm) ----
def test_smollm2_facts(smollm2):
    assert (smollm2.n_vocab, smollm2.bos_id, smollm2.eos_id, smollm2.add_bos) == (49152, 1, 2, False)
    assert smollm2.eog_ids == [0, 2, 4]
    assert [smollm2.is_eog(i) for i in (0, 1, 2, 3, 4, 5)] == [True, False, True, False, True, False]
    assert smollm2.token_type(1) == rt.TokenType.CONTROL
    assert smollm2.token_type(216) == rt.TokenType.NORMAL


def test_smollm2_quirks(smollm2):
    enc = lambda s, **kw: pieces(smollm2, smollm2.encode(s, **kw))  # noqa: E731
    assert enc("the year 2024") == ["the", " year", " ", "2", "0", "2", "4"]
    assert enc("\t\tdouble") == ["\t", "\t", "double"]
    assert enc("city\t\t\tend") == ["city", "\t\t", "\t", "end"]
    assert smollm2.encode("<|im_start|>user", add_special=True, parse_special=True)[0] == 1
    assert 1 not in smollm2.encode("<|im_start|>user", add_special=True, parse_special=False)
    assert smollm2.encode("", add_special=True) == []
    # control tokens are hidden unless special
    assert smollm2.piece(2) == b"" and smollm2.piece(2, special=True) == b"<|im_end|>"
    assert smollm2.decode([1, 216, 2]) == b" "


def test_smollm2_split_character_pieces(smollm2):
    ids = smollm2.encode("日本語")
    raw = [smollm2.piece(i) for i in ids]
    assert b"".join(raw) == "日本語".encode()
    s = rt.Utf8Stream()
    assert "".join(s.push(p) for p in raw) + s.finish() == "日本語"


# ---- Gemma 3 (SPM) ----
def test_gemma3_facts(gemma3):
    assert (gemma3.n_vocab, gemma3.bos_id, gemma3.eos_id, gemma3.add_bos) == (262144, 2, 1, True)
    assert gemma3.eog_ids == [1, 106, 212]
    assert gemma3.token_type(212) == rt.TokenType.CONTROL  # </s> forced to CONTROL as an end marker
    assert gemma3.token_type(238) == rt.TokenType.BYTE
    assert gemma3.encode("The capital of France is") == [2, 818, 5279, 529, 7001, 563]


def test_gemma3_quirks(gemma3):
    enc = lambda s, **kw: pieces(gemma3, gemma3.encode(s, add_special=False, **kw))  # noqa: E731
    assert enc("multiple   spaces") == ["multiple", "   ", "spaces"]
    assert enc(" " * 40) == [" " * 31, " " * 9]
    assert enc("<s>old</s>") == ["<s>", "old", "</", "s", ">"]
    assert enc("<s>old</s>", parse_special=True) == ["<s>", "old", "</s>"]
    assert enc("with <eos>", parse_special=True)[-2:] == [" ", "<eos>"]
    assert enc(" leading")[0] == " leading"
    assert gemma3.encode("<bos>hi", add_special=True, parse_special=True)[:2] == [2, 2]
    assert gemma3.encode("\u00a0", add_special=False) == [238 + 0xC2, 238 + 0xA0]
    assert gemma3.piece(238 + 0xC2) == b"\xc2"
    assert gemma3.encode("", add_special=True) == [2]


# ---- errors ----
@pytest.mark.parametrize("bad", [-1, 262144, 2**40])
def test_out_of_range_ids_raise(gemma3, bad):
    with pytest.raises(IndexError):
        gemma3.piece(bad)
    with pytest.raises(IndexError):
        gemma3.decode([5, bad])
    with pytest.raises(IndexError):
        gemma3.token_type(bad)
    assert not gemma3.is_eog(bad)


def test_invalid_utf8_input_does_not_crash(smollm2, gemma3):
    for tok in (smollm2, gemma3):
        ids = tok.encode(b"a\xff\xfe\xc3", add_special=False)
        assert ids and all(0 <= i < tok.n_vocab for i in ids)


def test_missing_file():
    with pytest.raises(ValueError):
        rt.Tokenizer("/nonexistent/model.gguf")


# ---- synthetic vocabularies ----

def write_gguf(path, model, tokens, pre=None, merges=None, scores=None, types=None, extra=None):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types or [1] * len(tokens))
    if merges is not None:
        w.add_token_merges(merges)
    if scores is not None:
        w.add_token_scores(scores)
    for k, v in (extra or {}).items():
        w.add_bool(k, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def bpe_vocab(extra_tokens):
    return [byte_char(b) for b in range(256)] + extra_tokens


def test_unknown_pre_and_model_are_named(tmp_path):
    p = write_gguf(tmp_path / "a.gguf", "gpt2", bpe_vocab([]), pre="no-such-pre", merges=[])
    with pytest.raises(rt.GgufError, match="no-such-pre"):
        rt.Tokenizer(p)
    p = write_gguf(tmp_path / "b.gguf", "rwkv", ["a"])
    with pytest.raises(rt.GgufError, match="rwkv"):
        rt.Tokenizer(p)


def test_bpe_merge_rank_and_leftmost_ties(tmp_path):
    toks = bpe_vocab(["aa", "ab", "ba", "aaa"])
    p = write_gguf(tmp_path / "m.gguf", "gpt2", toks, pre="gpt2", merges=["a a", "aa a", "b a", "a b"])
    tok = rt.Tokenizer(p)
    dec = lambda ids: [tok.piece(i).decode() for i in ids]  # noqa: E731
    assert dec(tok.encode("aaaa", add_special=False)) == ["aa", "aa"]  # tie at 0,1,2 -> left-most first
    assert dec(tok.encode("aaa", add_special=False)) == ["aaa"]
    assert dec(tok.encode("aba", add_special=False)) == ["a", "ba"]  # rank("b a") < rank("a b")
    assert dec(tok.encode("a b", add_special=False)) == ["a", " ", "b"]  # no merge crosses a pre-token


def test_spm_scores_byte_fallback_and_space_prefix(tmp_path):
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["a", "b", "ab", "▁", "▁a", "bb"]
    types = [2, 3, 3] + [6] * 256 + [1] * 6
    scores = [0.0] * 259 + [-1.0, -1.0, -2.0, -1.0, -3.0, -2.0]
    p = write_gguf(tmp_path / "s.gguf", "llama", toks, scores=scores, types=types,
                   extra={"tokenizer.ggml.add_space_prefix": True})
    tok = rt.Tokenizer(p)
    txt = lambda ids: [tok.piece(i) for i in ids]  # noqa: E731
    # "▁abb": "ab" (-2) ties "bb" (-2) and beats "▁a" (-3): the left-most tie wins
    assert txt(tok.encode("abb", add_special=False)) == [b" ", b"ab", b"b"]
    assert txt(tok.encode("ab", add_special=False)) == [b" ", b"ab"]
    assert txt(tok.encode("aé", add_special=False)) == [b" a", b"\xc3", b"\xa9"]  # byte fallback
    assert tok.encode("a", add_special=True)[0] == 1 and tok.piece(1) == b""


# ---- round trip / robustness over arbitrary input ----
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_round_trip_any_text(smollm2, gemma3, text):
    # SPM with byte fallback (no space prefix) is lossless.
    data = text.encode("utf-8")
    assert gemma3.decode(gemma3.encode(text, add_special=False), special=True) == data
    # SmolLM2's byte-level vocab lacks the characters of these 21 bytes (and no merge uses them):
    # the reference drops such bytes, and so do we.
    missing = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100)}
    ids = smollm2.encode(text, add_special=False)
    assert smollm2.decode(ids, special=True) == bytes(b for b in data if b not in missing)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60), st.booleans())
def test_arbitrary_bytes_never_crash(smollm2, gemma3, data, parse_special):
    for tok in (smollm2, gemma3):
        ids = tok.encode(data, add_special=True, parse_special=parse_special)
        assert all(0 <= i < tok.n_vocab for i in ids)


def test_harmony_end_is_no_end_of_generation(tmp_path):
    """gpt-oss's o200k_harmony vocabulary: with <|return|> and <|call|> present, <|end|> (which closes the
    reasoning message before the answer) ends no generation and prints like text, as in llama.cpp."""
    toks = bpe_vocab(["<|end|>", "<|return|>", "<|call|>", "<|start|>"])
    types = [1] * 256 + [3, 3, 3, 3]
    tok = rt.Tokenizer(write_gguf(tmp_path / "h.gguf", "gpt2", toks, pre="gpt-4o", merges=["a b"], types=types))
    assert tok.eog_ids == [257, 258]
    assert tok.token_type(256) == rt.TokenType.USER_DEFINED and tok.piece(256) == b"<|end|>"
    without = rt.Tokenizer(write_gguf(tmp_path / "e.gguf", "gpt2", bpe_vocab(["<|end|>"]), pre="gpt-4o", merges=["a b"],
                                      types=[1] * 256 + [3]))
    assert without.eog_ids == [256]
