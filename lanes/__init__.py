"""Lane processes and the in-process model API of laneserve."""
from lanes.model_files import KNOWN_MODELS, find_model_file, gemma3_path, smollm2_path

__all__ = ["KNOWN_MODELS", "find_model_file", "gemma3_path", "smollm2_path"]
