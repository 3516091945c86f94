"""`laneserve` argument parsing: serve flags map 1:1 to config fields; env fills the rest."""
import subprocess
import sys

import pytest

from gateway.cli.main import build_parser, main, serve_config
from gateway.server.config import FIELDS, flag_name


def test_every_config_field_is_a_serve_flag():
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]
    options = {opt for action in serve._actions for opt in action.option_strings}
    assert {flag_name(name) for name in FIELDS} <= options


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
