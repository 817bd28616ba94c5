"""Run by Python at start-up in the child processes of tests that have the disk watermarks off
(tests/conftest.py puts this directory first on their ``PYTHONPATH``): their stores and channels
get the watermarks off too, once they import tflux (tests/_watermarks.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
try:
    import _watermarks

    sys.meta_path.insert(0, _watermarks.SwitchOffOnImport())
except Exception:
    pass  # nothing to switch off here
finally:
    del sys.path[0]
