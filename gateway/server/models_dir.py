"""--models-dir: every GGUF file in one directory, registered under its file stem, served on demand.

Read once at start (a file added later needs a restart, as llama-server's router). Names follow
--model's rule (MODEL_NAME_RE); a file whose stem breaks it is skipped with a reason. Which
models are given with --model (loaded at start) and which come from the directory (loaded on
first use) is decided here too.
"""
from __future__ import annotations

from pathlib import Path

from gateway.server.config import DEFAULT_MODEL, MODEL_NAME_RE, ConfigError, GatewayConfig, ModelEntry

GGUF_SUFFIX = ".gguf"


def scan_models_dir(directory: str) -> tuple[dict[str, str], list[str]]:
    """({name: path} of the directory's GGUF files in name order, [why a file was skipped])."""
    found: dict[str, str] = {}
    skipped: list[str] = []
    for path in sorted(Path(directory).expanduser().iterdir()):
        if path.suffix.lower() != GGUF_SUFFIX or not path.is_file():
            continue
        name = path.name[: -len(GGUF_SUFFIX)]
        if not MODEL_NAME_RE.match(name):
            skipped.append(f"{path.name}: its name must be 1-64 letters, digits, '.', '_', ':', '-'")
        elif name in found:
            skipped.append(f"{path.name}: another file already has the name {name!r}")
        else:
            found[name] = str(path)
    return found, skipped


def eager_entries(config: GatewayConfig) -> tuple[ModelEntry, ...]:
    """The --model entries, loaded at start. With --models-dir the default model (no --model
    given) is not added: the directory's models are the ones served."""
    default = (ModelEntry(DEFAULT_MODEL, DEFAULT_MODEL),)
    if config.models_dir is not None and config.models == default:
        return ()
    return config.models


def on_demand_paths(config: GatewayConfig, eager_names) -> tuple[dict[str, str], list[str]]:
    """The directory's models ({} without --models-dir); a name also given with --model is an error."""
    if config.models_dir is None:
        return {}, []
    found, skipped = scan_models_dir(config.models_dir)
    clash = sorted(set(found) & set(eager_names))
    if clash:
        raise ConfigError(f"models_dir: {', '.join(clash)} also given with --model (rename the file or the model)")
    return found, skipped
