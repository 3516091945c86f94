"""Lane processes and the in-process model API of laneserve.

Every public name is imported on first use: a lane process (`python -m lanes.lane_process`)
imports this package first, and each module it does not need is resident memory paid again by
every replica.
"""
__all__ = ["Generation", "GenerationStats", "KNOWN_MODELS", "Model", "find_model_file", "gemma3_path", "smollm2_path"]


def __getattr__(name: str):
    # The native runtime is imported on first use, so locating model files needs no build.
    if name in ("Model", "Generation", "GenerationStats"):
        from lanes import model

        return getattr(model, name)
    if name == "KNOWN_MODELS":
        from lanes import registry

        return registry.KNOWN_MODELS
    if name in ("find_model_file", "gemma3_path", "smollm2_path"):
        from lanes import model_files

        return getattr(model_files, name)
    raise AttributeError(f"module 'lanes' has no attribute {name!r}")
