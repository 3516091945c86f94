"""`laneserve` argument parsing: serve flags map 1:1 to config fields; env fills the rest."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli.main import build_parser, main, serve_config
from gateway.server.config import FIELDS, default_text, flag_name

README = Path(__file__).resolve().parents[3] / "gateway" / "README.md"


def _serve_parser():
    return build_parser()._subparsers._group_actions[0].choices["serve"]


def test_every_config_field_is_a_serve_flag():
    options = {opt for action in _serve_parser()._actions for opt in action.option_strings}
    assert {flag_name(name) for name in FIELDS} <= options


def test_serve_help_states_every_config_default():
    helps = {action.option_strings[0]: action.help for action in _serve_parser()._actions if action.option_strings}
    for name in FIELDS:
        assert helps[flag_name(name)].endswith(f"(default {default_text(name)})"), name


def test_readme_settings_table_states_every_config_default():
    """gateway/README.md's settings table: a row for every setting, with the default --help states."""
    text = README.read_text()
    table = text[text.index("## Settings"):]
    table = table[:table.index("\n## ")]
    stated = {}
    for row in re.findall(r"^\| `--.*$", table, re.M):
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        flags = re.findall(r"--[a-z][a-z-]*", cells[0])
        defaults = [value.strip().strip("`") for value in cells[2].split(",")]
        assert len(flags) == len(defaults), row
        stated.update(zip(flags, defaults))
    assert stated == {flag_name(name): default_text(name) for name in FIELDS}


def test_serve_flags_build_the_config():
    args = build_parser().parse_args([
        "serve", "--model", "a=smollm2", "--model", "b=gemma3", "--replicas", "2", "--threads", "2",
        "--ctx-size", "2048", "--host", "127.0.0.1", "--port", "9001", "--records", "r.jsonl", "--lenient",
        "--parallel", "4", "--max-batch-tokens", "128", "--max-queue", "2", "--queue-timeout-s", "1.5",
        "--cors-origins", "http://localhost:3000", "*",
    ])
    config = serve_config(args, {})
    assert [m.name for m in config.models] == ["a", "b"]
    assert (config.replicas, config.threads, config.ctx_size, config.port) == (2, 2, 2048, 9001)
    assert (config.parallel, config.max_batch_tokens, config.max_queue, config.queue_timeout_s) == (4, 128, 2, 1.5)
    assert config.records == "r.jsonl" and config.lenient
    assert config.cors_origins == ("http://localhost:3000", "*")


def test_flags_override_environment():
    args = build_parser().parse_args(["serve", "--replicas", "2"])
    config = serve_config(args, {"replicas": "4", "threads": "2"})
    assert config.replicas == 2 and config.threads == 2


def test_bad_flag_value_exits_2_with_message(capsys):
    assert main(["serve", "--replicas", "0"]) == 2
    assert "replicas" in capsys.readouterr().err


def test_pull_unknown_model_is_refused(capsys):
    assert main(["pull", "no-such-model"]) == 2
    assert "unknown model" in capsys.readouterr().err


def test_help_runs_as_a_program():
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "--ctx-size" in out.stdout and "--cors-origins" in out.stdout
    assert "--parallel" in out.stdout and "--max-queue" in out.stdout and "--queue-timeout-s" in out.stdout


@pytest.mark.parametrize("argv", [["models"]])
def test_models_lists_known_models(argv, capsys):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "smollm2" in out and "gemma3" in out


@pytest.mark.real_model
def test_pull_of_an_installed_model_reports_its_file(capsys):
    assert main(["pull", "smollm2"]) == 0
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in capsys.readouterr().out
