"""The options of the ``tflux`` data source (strings, as Spark passes them) and the ``columns``
selection, shared by the batch reader (``source``) and the stream reader (``stream``)."""

from __future__ import annotations

from tflux.spark import _columns


def flag(options, name: str, default: bool = False) -> bool:
    value = options.get(name)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"tflux: option {name}={value!r} is not a boolean (true/false)")


def dialect_option(options) -> str | None:
    """The ``dialect`` option: ``spec``, ``taskflux`` or unset (detect)."""
    value = options.get("dialect")
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip().lower()
    if text not in ("spec", "taskflux"):
        raise ValueError(f"tflux: option dialect={value!r} is not spec or taskflux")
    return text


def lsn_option(options, name: str) -> int | None:
    value = options.get(name)
    if value is None or str(value).strip() == "":
        return None
    try:
        lsn = int(str(value).strip())
    except ValueError:
        raise ValueError(f"tflux: option {name}={value!r} is not an LSN (an integer)") from None
    if lsn < 0:
        raise ValueError(f"tflux: option {name}={value!r} is negative")
    return lsn


def column_names(options) -> list[str] | None:
    """The ``columns`` option, checked against the schema (None: every column)."""
    text = options.get("columns")
    if text is None or not str(text).strip():
        return None
    names = [c.strip() for c in str(text).split(",") if c.strip()]
    known = _columns.log_schema(flag(options, "rawData")).names
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"tflux: unknown column(s) {', '.join(unknown)} (known: {', '.join(known)})"
        )
    return [n for n in known if n in names]


def select(batches, names: list[str] | None):
    if names is None:
        yield from batches
    else:
        for batch in batches:
            yield batch.select(names)
