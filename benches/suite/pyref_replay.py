"""The pure-Python queue replay, now in ``tflux._pyref`` (``tflux bench`` needs it from a wheel)."""

from tflux._pyref import PyQueue, PyState, ReplayError, replay

__all__ = ["PyQueue", "PyState", "ReplayError", "replay"]
