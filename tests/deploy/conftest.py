"""tests/deploy: laneserve behind real load balancers (helpers in balancers.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib: make balancers importable
