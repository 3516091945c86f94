"""Synthetic prompts of an exact token length, sized with the served model's own tokenizer
(our native tokenizer from the GGUF, so no Hugging Face download is needed).

Each prompt opens with its own number, so no two prompts share a prefix beyond a few tokens and
no server's prefix cache turns a prefill into a lookup. Seeded: both servers of a comparison get
the same prompts.
"""
from __future__ import annotations

import random

_WORDS = """time river stone light garden window market letter morning valley winter bridge harbor
candle forest silver paper engine island story pocket thunder orchard lantern meadow copper mirror
village pepper ladder basket castle feather planet signal violin wagon anchor blanket cotton desert
kettle ribbon saddle tunnel whistle yellow quiet gentle narrow heavy bright distant careful golden
wooden hidden simple patient curious sudden early late slowly softly often rarely carried opened
listened walked painted counted folded wondered gathered followed remembered""".split()


def model_file(source: str) -> str:
    """`NAME=PATH_OR_ALIAS`, a known alias (lanes/registry.py) or a .gguf path → the GGUF file."""
    from lanes.model_files import find_model_file

    return str(find_model_file(source.split("=", 1)[1] if "=" in source else source))


class PromptMaker:
    def __init__(self, gguf_path: str) -> None:
        from lanes._runtime import Tokenizer  # native: the same tokenizer laneserve serves with

        self.tokenizer = Tokenizer(gguf_path)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, False, False))

    def _decode(self, ids: list[int]) -> str:
        return bytes(self.tokenizer.decode(ids)).decode("utf-8", errors="replace")

    def make(self, index: int, num_tokens: int, seed: int) -> tuple[str, list[int]]:
        """(text, ids) with len(ids) == num_tokens and encode(text) == ids (no special tokens)."""
        rng = random.Random(seed * 1_000_003 + index)
        words = [f"{index}."] + [rng.choice(_WORDS) for _ in range(num_tokens + 8)]
        ids = self._encode(" ".join(words))
        while len(ids) < num_tokens:  # rare: words merged into fewer tokens than words
            words += [rng.choice(_WORDS) for _ in range(num_tokens)]
            ids = self._encode(" ".join(words))
        ids = ids[:num_tokens]
        # A cut inside a word can re-tokenize differently; trim until text and ids agree, then pad
        # with single-token words (a space-led common word is one token in byte-level BPE vocabularies).
        text = self._decode(ids)
        for _ in range(16):
            again = self._encode(text)
            if len(again) == num_tokens:
                return text, again
            if len(again) > num_tokens:
                text = text[: max(1, len(text) - 2)].rstrip()
            else:
                text += " " + rng.choice(_WORDS)
        return text, self._encode(text)


def make_prompts(maker: PromptMaker, count: int, num_tokens: int, seed: int, first_index: int = 0) -> list[dict]:
    prompts = []
    for i in range(first_index, first_index + count):
        text, ids = maker.make(i, num_tokens, seed)
        prompts.append({"text": text, "ids": ids})
    return prompts
