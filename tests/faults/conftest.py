"""Make `tests.faults.adapters` importable in the worker processes the runner spawns.

The root goes at the end of sys.path, so the installed `conformance` package still wins.
"""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.append(ROOT)
