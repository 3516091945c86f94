"""GatewayConfig validation, the flag/env mapping, and `--model` parsing."""
import dataclasses

import pytest

from gateway.server.config import (
    ConfigError, GatewayConfig, ModelEntry, config_from_strings, env_name, field_names, flag_name, parse_model_arg,
)
from gateway.server.env import settings_from_env


def test_defaults_serve_smollm2_on_loopback():
    config = GatewayConfig()
    assert config.models == (ModelEntry("smollm2", "smollm2"),)
    assert config.host == "127.0.0.1" and config.port == 8000
    assert config.lenient is False and config.cors_origins == ()


def test_batching_defaults():
    config = GatewayConfig()
    assert (config.parallel, config.max_batch_tokens, config.max_queue, config.queue_timeout_s) == (0, 256, 64, 60.0)
    assert GatewayConfig(max_queue=0).max_queue == 0  # no queue: 429 as soon as every slot is taken


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        GatewayConfig().replicas = 3


@pytest.mark.parametrize("kwargs, field", [
    ({"replicas": 0}, "replicas"),
    ({"replicas": True}, "replicas"),
    ({"threads": -1}, "threads"),
    ({"threads": 257}, "threads"),
    ({"ctx_size": 8}, "ctx_size"),
    ({"port": 70000}, "port"),
    ({"keepalive_interval_s": 0}, "keepalive_interval_s"),
    ({"keepalive_interval_s": 30, "response_timeout_s": 20}, "keepalive_interval_s"),
    ({"log_level": "loud"}, "log_level"),
    ({"log_format": "pretty"}, "log_format"),
    ({"cors_origins": ("not an origin",)}, "cors_origins"),
    ({"models": ()}, "models"),
    ({"models": (ModelEntry("a", "x"), ModelEntry("a", "y"))}, "duplicate"),
    ({"parallel": -1}, "parallel"),
    ({"parallel": 257}, "parallel"),
    ({"parallel": 2.0}, "parallel"),
    ({"max_batch_tokens": 0}, "max_batch_tokens"),
    ({"max_queue": -1}, "max_queue"),
    ({"queue_timeout_s": 0}, "queue_timeout_s"),
    ({"prefix_cache_dir": "/nonexistent/prefix-cache"}, "prefix_cache_dir"),
    ({"prefix_cache_disk_mib": -1}, "prefix_cache_disk_mib"),
])
def test_invalid_values_are_rejected_naming_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        GatewayConfig(**kwargs)


@pytest.mark.parametrize("text, name, source", [
    ("smollm2", "smollm2", "smollm2"),
    ("chat=smollm2", "chat", "smollm2"),
    ("g=/models/gemma.gguf", "g", "/models/gemma.gguf"),
    ("/models/tiny-llama.gguf", "tiny-llama", "/models/tiny-llama.gguf"),
])
def test_parse_model_arg(text, name, source):
    assert parse_model_arg(text) == ModelEntry(name, source)


def test_model_names_are_restricted():
    with pytest.raises(ConfigError):
        parse_model_arg("bad name\n=smollm2")


def test_strings_convert_to_field_types():
    config = config_from_strings({
        "models": ["a=smollm2", "b=gemma3"], "replicas": "2", "lenient": "true", "cors_origins": "*",
        "keepalive_interval_s": "2.5", "records": "/tmp/r.jsonl", "parallel": "4", "max_batch_tokens": "64",
        "max_queue": "3", "queue_timeout_s": "0.5",
    })
    assert (config.parallel, config.max_batch_tokens, config.max_queue, config.queue_timeout_s) == (4, 64, 3, 0.5)
    assert [m.name for m in config.models] == ["a", "b"]
    assert config.replicas == 2 and config.lenient is True and config.cors_origins == ("*",)
    assert config.keepalive_interval_s == 2.5 and config.records == "/tmp/r.jsonl"


def test_comma_separated_models_for_env_and_sanic_cli():
    config = config_from_strings({"models": "a=smollm2,b=gemma3"})
    assert [m.source for m in config.models] == ["smollm2", "gemma3"]


def test_unparseable_numbers_name_the_field():
    with pytest.raises(ConfigError, match="replicas"):
        config_from_strings({"replicas": "two"})
    with pytest.raises(ConfigError, match="lenient"):
        config_from_strings({"lenient": "maybe"})


def test_later_source_overrides_base():
    base = config_from_strings({"replicas": "2", "threads": "2"})
    assert config_from_strings({"threads": "1"}, base) == dataclasses.replace(base, threads=1)


def test_every_field_has_one_flag_and_one_env_var():
    flags = [flag_name(f) for f in field_names()]
    envs = [env_name(f) for f in field_names()]
    assert len(set(flags)) == len(flags) and len(set(envs)) == len(envs)
    assert flag_name("ctx_size") == "--ctx-size" and env_name("ctx_size") == "LANESERVE_CTX_SIZE"
    assert flag_name("models") == "--model" and env_name("models") == "LANESERVE_MODEL"


def test_prefix_cache_settings_reach_the_lane_specs(tmp_path):
    from gateway.serve.lanes import lane_specs

    env = {"LANESERVE_PREFIX_CACHE_DIR": str(tmp_path), "LANESERVE_PREFIX_CACHE_DISK_MIB": "512"}
    config = config_from_strings(settings_from_env(env))
    (spec,) = lane_specs(config, {"smollm2": "synthetic:n_ctx=1024"})
    assert (spec.prefix_cache_dir, spec.prefix_cache_disk_mib) == (str(tmp_path.resolve()), 512)
    (off,) = lane_specs(GatewayConfig(), {"smollm2": "synthetic:n_ctx=1024"})
    assert (off.prefix_cache_dir, off.prefix_cache_disk_mib) == ("", 4096)


def test_env_reader_reads_only_laneserve_fields():
    env = {"LANESERVE_REPLICAS": "3", "LANESERVE_MODEL": "x=smollm2", "LANESERVE_BOGUS": "1", "PATH": "/bin"}
    assert settings_from_env(env) == {"replicas": "3", "models": "x=smollm2"}
    assert config_from_strings(settings_from_env(env)).replicas == 3


def test_synthetic_specs_keep_their_commas():
    config = config_from_strings({"models": "fake=synthetic:step_us=100,n_ctx=512,b=gemma3,c=/m/x.gguf"})
    assert [(m.name, m.source) for m in config.models] == [
        ("fake", "synthetic:step_us=100,n_ctx=512"), ("b", "gemma3"), ("c", "/m/x.gguf")]
    flags = config_from_strings({"models": ["fake=synthetic:step_us=1,n_ctx=64", "smollm2"]})
    assert flags.models[0].source == "synthetic:step_us=1,n_ctx=64"


def test_automatic_threads_share_the_cores_among_lanes(monkeypatch):
    import gateway.server.config as config_module

    monkeypatch.setattr(config_module, "available_cores", lambda: 8)
    assert GatewayConfig().lane_threads() == 8
    assert GatewayConfig(replicas=2).lane_threads() == 4
    assert GatewayConfig(replicas=16).lane_threads() == 1
    assert GatewayConfig(threads=3, replicas=2).lane_threads() == 3
