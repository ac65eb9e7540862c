"""Tests of the course machinery (attn_lib.course): they share tests/'s helpers (references.py, exercise_asserts.py)."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent.parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
