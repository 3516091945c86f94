"""llama.cpp's mtmd reference data (tests/data/vision/make_reference.py made them)."""
import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "data" / "vision"
REF = json.loads((DATA / "reference.json").read_text(encoding="utf-8"))
ARRAYS = np.load(DATA / "reference.npz")
