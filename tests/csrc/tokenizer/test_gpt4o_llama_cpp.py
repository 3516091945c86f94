"""The gpt-4o pre-tokenizer (gpt-oss, llama4 files) tokenizes as llama.cpp does: 1000 random strings over
pair_vocab's alphabet, llama.cpp's ids stored by tests/data/gpt4o/make_reference.py. Every character pair
of the alphabet is a merge, so a piece boundary in another place changes the ids (the llama3 splitter on
the same vocabulary disagrees with llama.cpp on about 30% of these strings)."""
import json
from pathlib import Path

import lanes._runtime as rt
from pair_vocab import random_texts, write_pair_vocab

REF = json.loads((Path(__file__).resolve().parents[2] / "data" / "gpt4o" / "reference.json").read_text("utf-8"))


def test_texts_are_the_ones_llama_cpp_tokenized():
    assert [c["text"] for c in REF] == random_texts(len(REF))


def test_ids_equal_llama_cpp(tmp_path):
    tok = rt.Tokenizer(str(write_pair_vocab(tmp_path / "pairs.gguf")))
    wrong = [c["text"] for c in REF if tok.encode(c["text"], add_special=False) != c["ids"]]
    assert not wrong, wrong[:5]
