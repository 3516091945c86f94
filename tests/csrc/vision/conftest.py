import os
import sys

# importlib import mode: make this folder's helper modules (tiny_gguf, golden) importable.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
