"""Regenerates llama.cpp's token ids for tests/csrc/tokenizer/test_gpt4o_llama_cpp.py.

Needs llama-cpp-python 0.3.36 and gguf:  /path/to/llama-venv/bin/python tests/data/gpt4o/make_reference.py

Writes the pair vocabulary (pair_vocab.py, pre-tokenizer gpt-4o), tokenizes pair_vocab.random_texts with
llama.cpp (no BOS, no special-token parsing) and stores the texts and ids in reference.json.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "csrc" / "tokenizer"))
from pair_vocab import random_texts, write_pair_vocab  # noqa: E402

N_TEXTS = 1000


def main() -> None:
    from llama_cpp import Llama

    with tempfile.TemporaryDirectory() as tmp:
        path = write_pair_vocab(Path(tmp) / "pairs.gguf")
        llm = Llama(str(path), vocab_only=True, verbose=False)
        cases = [{"text": t, "ids": llm.tokenize(t.encode(), add_bos=False, special=False)} for t in random_texts(N_TEXTS)]
    (HERE / "reference.json").write_text(json.dumps(cases, ensure_ascii=False) + "\n", encoding="utf-8")
    print(len(cases), "texts")


if __name__ == "__main__":
    main()
