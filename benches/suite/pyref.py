"""The pure-Python segment reader, now in ``tflux._pyref`` (``tflux bench`` uses it too)."""

from tflux._pyref import (
    END_MARKER,
    FILE_HEADER,
    RECORD_HEADER,
    RECORD_MARKER,
    SegmentError,
    scan_bytes,
    scan_log,
    scan_segment,
    segment_files,
)

__all__ = [
    "END_MARKER",
    "FILE_HEADER",
    "RECORD_HEADER",
    "RECORD_MARKER",
    "SegmentError",
    "scan_bytes",
    "scan_log",
    "scan_segment",
    "segment_files",
]
