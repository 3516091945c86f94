"""Shared helpers for the native tokenizer tests: golden data and one Tokenizer per real model."""
import json
from pathlib import Path

import lanes
import lanes._runtime as rt

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden"
MODELS = {
    "smollm2-135m-instruct-q4_1": lanes.smollm2_path,
    "gemma3-270m-q4_k_m": lanes.gemma3_path,
}


def golden_entries(model_dir: str) -> list[dict]:
    path = GOLDEN / model_dir / "dev" / "tokenize.jsonl"
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


_cache: dict[str, "rt.Tokenizer"] = {}


def tokenizer_for(model_dir: str) -> "rt.Tokenizer":
    if model_dir not in _cache:
        _cache[model_dir] = rt.Tokenizer(MODELS[model_dir]())
    return _cache[model_dir]


def as_golden_piece(b: bytes):
    """str when the bytes are valid UTF-8, else the list of byte values (golden convention)."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return list(b)
