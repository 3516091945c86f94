"""`laneserve tokenizer export`: write a Hugging Face `tokenizer.json` + `tokenizer_config.json`
from a GGUF file, so that benchmark clients (AIPerf, `vllm bench serve`, llama-benchy) and
`transformers` count tokens exactly as our runtime does, offline.

Both files are written as plain JSON (no `tokenizers` import needed at run time). The mapping,
checked id for id against our tokenizer on the golden data (tests/gateway/cli/test_tokenizer_export.py):

- `gpt2` (byte-level BPE): the GGUF merges in rank order; pre-tokenizer ByteLevel (the GPT-2
  regex), preceded by Digits(individual) for the starcoder family (`smollm`, ...).
- `llama` (SentencePiece-style, scores): a BPE model with byte_fallback whose merges are every
  split of every token into two tokens, ranked by the merged token's score (highest first), which
  is the merge order our SPM encoder follows; spaces become `▁` in a normalizer.

Control / unknown tokens (after our forcing of end-of-generation and FIM tokens) become special
added tokens, user-defined ones non-special added tokens: `parse_special=False` corresponds to
the `tokenizers` option `encode_special_tokens=True`.
"""
from __future__ import annotations

import json
from pathlib import Path

SPM_SPACE = "\u2581"
# tokenizer.ggml.pre values whose pre-tokenization we reproduce (see csrc/tokenizer/pretokenize.cpp)
GPT2_PRE = {"gpt2", "gpt-2", "phi-2"}
STARCODER_PRE = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"}


class ExportError(ValueError):
    """A GGUF tokenizer we cannot express exactly in the tokenizer.json format."""


def _added_tokens(texts: list[str], types: list[str]) -> list[dict]:
    added = []
    for i, (text, kind) in enumerate(zip(texts, types)):
        if kind in ("CONTROL", "UNKNOWN", "USER_DEFINED"):
            added.append({
                "id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": kind != "USER_DEFINED",
            })
    return added


def _vocab(texts: list[str]) -> dict[str, int]:
    return {t: i for i, t in enumerate(texts)}  # a repeated text maps to the last id, as ours


def _bpe_model(vocab: dict, merges: list, *, byte_fallback: bool, unk: str | None) -> dict:
    return {
        "type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
        "end_of_word_suffix": None, "fuse_unk": byte_fallback, "byte_fallback": byte_fallback,
        "ignore_merges": False, "vocab": vocab, "merges": merges,
    }


def _gpt2_parts(gguf, texts: list[str]) -> dict:
    pre = gguf.get("tokenizer.ggml.pre", "") or ""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    if pre in GPT2_PRE:
        pre_tokenizer = byte_level
    elif pre in STARCODER_PRE:
        pre_tokenizer = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level]}
    else:
        raise ExportError(f"pre-tokenizer {pre!r} is not supported by the export "
                          f"(supported: {', '.join(sorted(GPT2_PRE | STARCODER_PRE))})")
    vocab = _vocab(texts)
    merges = []
    for m in gguf.get("tokenizer.ggml.merges", []) or []:
        sp = m.find(" ", 1)
        if sp < 0:
            raise ExportError(f"malformed BPE merge {m!r}")
        left, right = m[:sp], m[sp + 1:]
        # as our loader: a merge whose parts or result are not tokens can never apply
        if left in vocab and right in vocab and left + right in vocab:
            merges.append([left, right])
    return {
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": _bpe_model(vocab, merges, byte_fallback=False, unk=None),
    }


def spm_merges(texts: list[str], scores: list[float]) -> list[list[str]]:
    """Every (left, right) split of a token into two tokens, best merged score first.

    Our SPM encoder merges the adjacent pair whose concatenation is the highest-scoring token;
    a BPE model with these merges in this order makes the same choices.
    """
    vocab = _vocab(texts)
    ranked = []
    for text, merged_id in vocab.items():
        for k in range(1, len(text)):
            left, right = text[:k], text[k:]
            if left in vocab and right in vocab:
                ranked.append((-scores[merged_id], merged_id, k, left, right))
    ranked.sort()
    return [[left, right] for _, _, _, left, right in ranked]


def _spm_parts(gguf, texts: list[str], types: list[str]) -> dict:
    scores = gguf.get("tokenizer.ggml.scores", None) or [0.0] * len(texts)
    if len(scores) != len(texts):
        raise ExportError("tokenizer.ggml.scores has a different length than tokenizer.ggml.tokens")
    normalizers = []
    if gguf.get("tokenizer.ggml.add_space_prefix", True):
        normalizers.append({"type": "Prepend", "prepend": SPM_SPACE})  # each text fragment, as ours
    normalizers.append({"type": "Replace", "pattern": {"String": " "}, "content": SPM_SPACE})
    unk = next((t for t, k in zip(texts, types) if k == "UNKNOWN"), None)
    return {
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPM_SPACE}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": _bpe_model(_vocab(texts), spm_merges(texts, scores), byte_fallback=True, unk=unk),
    }


def _post_processor(texts: list[str], bos_id: int, eos_id: int, add_bos: bool, add_eos: bool) -> dict | None:
    if not (add_bos and bos_id >= 0) and not (add_eos and eos_id >= 0):
        return None
    first = [{"SpecialToken": {"id": texts[bos_id], "type_id": 0}}] if add_bos and bos_id >= 0 else []
    last = [{"SpecialToken": {"id": texts[eos_id], "type_id": 0}}] if add_eos and eos_id >= 0 else []
    specials = {}
    for i in (bos_id if add_bos else -1, eos_id if add_eos else -1):
        if i >= 0:
            specials[texts[i]] = {"id": texts[i], "ids": [i], "tokens": [texts[i]]}
    seq = lambda name: {"Sequence": {"id": name, "type_id": 0}}  # noqa: E731
    return {"type": "TemplateProcessing", "single": first + [seq("A")] + last,
            "pair": first + [seq("A")] + last + first + [seq("B")] + last, "special_tokens": specials}


def build_tokenizer_files(gguf, tokenizer) -> tuple[dict, dict]:
    """(tokenizer.json, tokenizer_config.json) contents for an open GgufFile and its Tokenizer."""
    kind = gguf.get("tokenizer.ggml.model", "")
    raw = list(gguf.get("tokenizer.ggml.tokens"))
    texts = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(raw)]  # as our loader names them
    types = [tokenizer.token_type(i).name for i in range(len(texts))]
    if kind == "gpt2":
        parts = _gpt2_parts(gguf, texts)
    elif kind == "llama":
        parts = _spm_parts(gguf, texts, types)
    else:
        raise ExportError(f"tokenizer model {kind!r} is not supported (supported: gpt2, llama)")
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    tokenizer_json = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": _added_tokens(texts, types),
        "normalizer": parts["normalizer"], "pre_tokenizer": parts["pre_tokenizer"],
        "post_processor": _post_processor(texts, bos, eos, tokenizer.add_bos, tokenizer.add_eos),
        "decoder": parts["decoder"], "model": parts["model"],
    }
    pad = gguf.get("tokenizer.ggml.padding_token_id", None)
    arch = gguf.get("general.architecture", "")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": texts[bos] if bos >= 0 else None,
        "eos_token": texts[eos] if eos >= 0 else None,
        "unk_token": next((t for t, k in zip(texts, types) if k == "UNKNOWN"), None),
        "pad_token": texts[pad] if isinstance(pad, int) and 0 <= pad < len(texts) else None,
        "add_bos_token": bool(tokenizer.add_bos),
        "add_eos_token": bool(tokenizer.add_eos),
        "clean_up_tokenization_spaces": False,
        "model_max_length": int(gguf.get(f"{arch}.context_length", 0) or 0) or 1_000_000_000,
    }
    template = gguf.get("tokenizer.chat_template", None)
    if isinstance(template, str) and template:
        config["chat_template"] = template
    return tokenizer_json, config


def export_tokenizer(model: str, out_dir: str) -> list[Path]:
    """Write tokenizer.json and tokenizer_config.json for MODEL (alias or .gguf path) into OUT_DIR."""
    import lanes._runtime as rt
    from lanes.model_files import find_model_file

    path = find_model_file(model)
    gguf = rt.GgufFile(str(path))
    tokenizer_json, config = build_tokenizer_files(gguf, rt.Tokenizer(str(path)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in (("tokenizer.json", tokenizer_json), ("tokenizer_config.json", config)):
        target = out / name
        target.write_text(json.dumps(content, ensure_ascii=False, indent=1 if name != "tokenizer.json" else None),
                          encoding="utf-8")
        written.append(target)
    return written
