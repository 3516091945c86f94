"""`--lora [MODEL:]NAME=PATH` at start: each adapter attached to its text model (the one named, else
the one whose GGUF architecture equals the adapter's), handed to that model's lanes
(LaneModelSpec.lora), which load it before they report ready. Ambiguous or no match: a start-up
error naming the candidates."""
from __future__ import annotations

from pathlib import Path

from gateway.server.config import ConfigError, GatewayConfig


def _architecture(path: str) -> str | None:
    from lanes._runtime import GgufFile  # native: imported where a file is read

    try:
        value = GgufFile(path).get("general.architecture")
    except Exception as exc:  # noqa: BLE001  (any unreadable file: say which)
        raise ConfigError(f"cannot read {path}: {exc}") from None
    return value if isinstance(value, str) else None


def adapters_by_model(config: GatewayConfig, text_paths: dict[str, str]) -> dict[str, tuple[tuple[str, str], ...]]:
    """model name → ((adapter name, path), ...); `text_paths`: the text models' GGUF files by name."""
    out: dict[str, list[tuple[str, str]]] = {}
    archs: dict[str, str | None] = {}
    for entry in config.lora:
        if entry.name in text_paths or any(entry.name == n for lst in out.values() for n, _ in lst):
            raise ConfigError(f"--lora {entry.name}: the name is taken (a model or another adapter)")
        if not Path(entry.path).is_file():
            raise ConfigError(f"--lora {entry.name}: no file at {entry.path}")
        if entry.model is not None:
            if entry.model not in text_paths:
                raise ConfigError(f"--lora {entry.model}:{entry.name}: no text model {entry.model!r} "
                                  f"(served: {', '.join(text_paths) or 'none'})")
            target = entry.model
        else:
            arch = _architecture(entry.path)
            for name, path in text_paths.items():
                archs.setdefault(name, _architecture(path))
            fits = [name for name in text_paths if archs[name] == arch]
            if len(fits) != 1:
                raise ConfigError(f"--lora {entry.name}: its architecture {arch!r} fits {len(fits)} text models "
                                  f"({', '.join(fits) or 'none'}); say which with --lora MODEL:{entry.name}=PATH")
            target = fits[0]
        out.setdefault(target, []).append((entry.name, str(Path(entry.path).resolve())))
    return {model: tuple(items) for model, items in out.items()}
