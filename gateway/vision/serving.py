"""The served models' vision projectors (`--mmproj NAME=MMPROJ`): loaded at start-up, with an error naming the
setting when one cannot serve, and what the lanes of such a model must be sized for.

A projector's model must be a GGUF text model given with --model, and the projector's output width must be that
model's n_embd (lanes._runtime.VisionEncoder checks it). Its lanes then take prompts whose positions may all be
image rows (LaneModelSpec.image_n_embd sizes the request ring), and for a non-causal projector (gemma3: an image
attends to itself both ways, so it is prefilled in one step) a step budget of at least one image plus a decode
token per slot (max_batch_tokens is raised to that).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaneNeeds:
    """What a model's lanes need for its projector's images."""
    image_n_embd: int      # float32 width of an image row (the text model's n_embd)
    step_tokens: int       # tokens one prefill step must hold for an image (0: images may be split)


def load_projectors(config, paths: dict[str, str], threads: int) -> dict:
    """Model name → gateway.vision.prompt.VisionModel for each --mmproj; ValueError naming the entry otherwise."""
    from gateway.serve.lanes import is_synthetic, model_kind
    from gateway.text.gguf_meta import read_model_meta
    from gateway.vision.prompt import VisionModel

    out = {}
    for entry in config.mmproj:
        where = f"mmproj {entry.model}={entry.path}"
        path = paths.get(entry.model)
        if path is None:
            raise ValueError(f"{where}: no --model named {entry.model!r} is loaded at start")
        if is_synthetic(path) or model_kind(path) != "text":
            raise ValueError(f"{where}: {entry.model!r} is not a GGUF text model")
        n_embd = read_model_meta(path).n_embd
        try:
            out[entry.model] = VisionModel(entry.path, text_n_embd=n_embd, n_threads=threads)
        except (OSError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{where}: {exc}") from None
    return out


def missing_marker_tokens(projectors: dict, texts: dict) -> str | None:
    """Why a projector's text model cannot take images, when its vocabulary lacks a marker token every image's
    layout uses (idefics3's <row_R_col_C> depend on the tiles: a request needing one the model lacks is a 400)."""
    from gateway.vision.layout import REQUIRED_TOKENS
    from gateway.vision.request import has_token

    for name, vision in projectors.items():
        missing = [t for t in REQUIRED_TOKENS[vision.projector_type] if not has_token(texts[name], t)]
        if missing:
            return (f"mmproj {name}={vision.path}: the text model's vocabulary lacks the {vision.projector_type} "
                    f"image marker token {missing[0]!r}")
    return None


def lane_needs(projectors: dict) -> dict[str, LaneNeeds]:
    return {name: LaneNeeds(v.encoder.n_embd_out, v.config.tokens_per_image if v.non_causal else 0)
            for name, v in projectors.items()}
