"""Fixtures for the native tokenizer tests: one Tokenizer per real model, loaded once.

The suite runs with --import-mode=importlib, so this directory is put on sys.path here to let
the test modules share tok_helpers.
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tok_helpers import tokenizer_for  # noqa: E402


@pytest.fixture(scope="session")
def smollm2():
    return tokenizer_for("smollm2-135m-instruct-q4_1")


@pytest.fixture(scope="session")
def gemma3():
    return tokenizer_for("gemma3-270m-q4_k_m")
