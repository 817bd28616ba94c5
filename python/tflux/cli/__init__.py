"""The ``tflux`` command line.

One module per verb (``demo``, ``replay``, ``inspect``, ``dump``, ``verify``, ``repair``,
``bench``, ``export``), each a click command that ``app`` registers on the ``cli`` group.
``tflux``, ``python -m tflux`` and ``python -m tflux.cli`` are the same command.
All storage work happens in the Rust core; the verbs only parse arguments, format output
(``_render``) and map errors to exit codes:

    0  success
    1  the data is corrupt (``verify`` found a fatal problem, a read or a replay hit a bad record)
    2  usage or I/O problem (bad arguments, missing directory, permission, locked directory...)

Progress bars and colours appear only on a terminal, so pipes and CI logs stay plain.
"""

from tflux.cli.app import cli, main

__all__ = ["cli", "main"]
