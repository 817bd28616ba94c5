"""The disk watermarks switched off for the tests' stores and channels (tests/conftest.py).

tflux refuses writes, and a channel collects by itself, when the file system holding the directory
is fuller than its watermarks (``DiskFullRatio`` 0.95; a channel's clean 0.85, low 0.90, high
0.95). The tests write under the temp directory, so on a host disk that full they would fail for a
reason that is not theirs (with the defaults lowered below the host's usage, 248 of them did).
:func:`switch_off` makes every store open get ``DiskFullRatio`` 1.0 and every channel open no
watermarks, where neither the caller (an argument) nor the base directory's settings file set them:
only what was left to the defaults changes. The tests of the watermarks and of the defaults keep
them (``@pytest.mark.disk_watermarks``). Child processes the tests start get the same through
``_child_site/sitecustomize.py``, on their ``PYTHONPATH``.
"""

from __future__ import annotations

# Imported here, not inside the finder below: an import there goes through the import system
# and so through the finder itself (infinite recursion where nothing imported it before).
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

NO_WATERMARKS = {"DiskFullRatio": 1.0}
NO_CHANNEL_WATERMARKS = {"disk_high_ratio": None, "disk_low_ratio": None, "disk_clean_ratio": None}
CHILD_SITE = Path(__file__).parent / "_child_site"


def _settings_file_sets(base: str, key: str) -> bool:
    """Whether ``base``'s settings file names ``key``. A file that is not a small regular file,
    or does not parse, is the test's (hostile input): treated as setting it, never read whole."""
    import os
    import stat

    path = Path(base) / "taskflux.settings.json"
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size > SMALL:
        return True
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return True
    return not isinstance(doc, dict) or key in doc


# Overrides or a settings file longer than this are a test's hostile input: left as they are.
SMALL = 64 << 10


def without_watermarks(base: str, overrides: str | None) -> str | None:
    """The JSON overrides of a store open, with ``NO_WATERMARKS`` where neither they nor the
    settings file set them."""
    if overrides is not None and len(overrides) > SMALL:
        return overrides
    try:
        given = json.loads(overrides) if overrides else {}
    except ValueError:
        return overrides
    if not isinstance(given, dict):
        return overrides
    added = {
        k: v
        for k, v in NO_WATERMARKS.items()
        if k not in given and not _settings_file_sets(base, k)
    }
    return json.dumps({**given, **added}) if added else overrides


def switch_off(setattr: Callable[[Any, str, Any], None] = setattr, module: Any = None) -> None:
    """Wraps ``Store._open`` (every store open of the package goes through it) and
    ``Channel.open`` of ``module`` (``tflux._tflux``); ``setattr`` is ``monkeypatch.setattr`` in a
    test (undone after it)."""
    if module is None:
        from tflux import _tflux as module

    store_open = module.Store._open
    channel_open = module.Channel.open

    def open_store(
        base_dir,
        settings_json=None,
        readonly=False,
        lock_timeout=None,
        dialect=None,
        share=True,
        create=False,
    ):
        overrides = without_watermarks(str(base_dir), settings_json)
        return store_open(base_dir, overrides, readonly, lock_timeout, dialect, share, create)

    def open_channel(*args, **kwargs):
        return channel_open(*args, **{**NO_CHANNEL_WATERMARKS, **kwargs})

    setattr(module.Store, "_open", staticmethod(open_store))
    setattr(module.Channel, "open", staticmethod(open_channel))


class SwitchOffOnImport:
    """A ``sys.meta_path`` finder for child processes: once the child itself imports
    ``tflux._tflux``, :func:`switch_off` (importing it at start-up would load the package before
    whatever the child does first, e.g. set a resource limit)."""

    def find_spec(self, fullname, path=None, target=None):
        # Called for every import the child makes: it must not import anything itself, and it
        # answers for one module only, once (it leaves sys.meta_path before looking that up).
        if fullname != "tflux._tflux" or self not in sys.meta_path:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_switch_off(module):
            exec_module(module)
            try:
                switch_off(module=module)
            except Exception:
                pass  # an older build without these entry points: nothing to switch off

        spec.loader.exec_module = exec_and_switch_off
        return spec
