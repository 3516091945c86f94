"""A byte-level BPE vocabulary in which every pair of characters of a small alphabet is one merge, so a
pre-tokenizer's piece boundaries show in the token ids (no merge crosses a boundary): the gpt-4o
pre-tokenizer is checked against llama.cpp's own tokenization of random strings over this alphabet
(tests/data/gpt4o/make_reference.py, test_gpt4o_llama_cpp.py)."""
from __future__ import annotations

import random
from pathlib import Path

import gguf

# ASCII of each case, non-ASCII letters of each case (and ß, 日), digits, the contraction characters,
# '/', whitespace (NBSP, tab, newline) and a combining mark: every branch of the gpt-4o regex.
ALPHABET = ["a", "b", "A", "B", "é", "É", " ", "'", "s", "S", "1", "2", "/", "\n", ".", "\t", "ß", "日", "\u00a0",
            "\u0301"]


def byte_char(b: int) -> str:
    """GPT-2 byte-level map."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in keep:
        return chr(b)
    return chr(0x100 + [x for x in range(256) if x not in keep].index(b))


def write_pair_vocab(path: Path, pre: str = "gpt-4o") -> Path:
    bc = [byte_char(b) for b in range(256)]
    enc = lambda s: "".join(bc[b] for b in s.encode())  # noqa: E731
    tokens, merges = list(bc), []
    for c in ALPHABET:  # multi-byte characters assemble from their bytes first
        b = enc(c)
        for k in range(2, len(b) + 1):
            merges.append(f"{b[:k - 1]} {b[k - 1]}")
            tokens.append(b[:k])
    for x in ALPHABET:
        for y in ALPHABET:
            merges.append(f"{enc(x)} {enc(y)}")
            tokens.append(enc(x + y))
    tokens = list(dict.fromkeys(tokens))
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges(merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def random_texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 24))) for _ in range(n)]
