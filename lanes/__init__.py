"""Lane processes and the in-process model API of laneserve."""
from lanes.model_files import KNOWN_MODELS, find_model_file, gemma3_path, smollm2_path

__all__ = ["Generation", "GenerationStats", "KNOWN_MODELS", "Model", "find_model_file", "gemma3_path", "smollm2_path"]


def __getattr__(name: str):
    # The native runtime is imported on first use, so locating model files needs no build.
    if name in ("Model", "Generation", "GenerationStats"):
        from lanes import model

        return getattr(model, name)
    raise AttributeError(f"module 'lanes' has no attribute {name!r}")
