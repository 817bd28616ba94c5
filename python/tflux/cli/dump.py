"""``tflux dump``: the records of a log as decoded deltas (or raw bytes), one per line."""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

import tflux
from tflux._layout import Layout
from tflux.cli import _render
from tflux.cli._base import (
    _is_channel,
    _locate,
    _located,
    _settings_for_reading,
    dialect_option,
)
from tflux.cli._render import (
    CONTEXT_SETTINGS,
    EXIT_CORRUPT,
    CliError,
    _implementation,
    _plural,
    _silence_stdout,
    err,
)
from tflux.errors import CorruptionError, TfluxError
from tflux.spark._paths import segment_names, start_lsn


def _dump_line_text(lsn: int, term: int, data: bytes, encode: Callable[[bytes], str]) -> str:
    crc = tflux.crc32(data)
    return f"lsn={lsn} term={term} length={len(data)} crc=0x{crc:08x} data={encode(data)}\n"


def _dump_line_json(lsn: int, term: int, data: bytes, encode: Callable[[bytes], str]) -> str:
    # Formatted by hand, 3x faster than json.dumps: integers and hex/base64 text need no escaping.
    crc = tflux.crc32(data)
    return (
        f'{{"lsn":{lsn},"term":{term},"length":{len(data)},"crc":{crc},"data":"{encode(data)}"}}\n'
    )


_ENCODINGS: dict[str, Callable[[bytes], str]] = {
    "hex": bytes.hex,
    "base64": lambda data: base64.b64encode(data).decode("ascii"),
}

_PREVIEW = 32  # message bytes shown by dump


def _preview(message: bytes, limit: int | None = _PREVIEW) -> str:
    """The first ``limit`` bytes of ``message`` (all: None) as ASCII: ``\\`` and other bytes
    escaped, ``...`` if cut."""
    shown = message if limit is None else message[:limit]
    text = "".join(
        "\\\\" if b == 0x5C else chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in shown
    )
    return text + ("..." if len(shown) < len(message) else "")


def _decoded(data: bytes, *, full: bool = False, b64: bool = False) -> dict[str, Any]:
    """``full``: the whole message as text, not a preview; ``b64``: add ``message_b64``."""
    """The fields of the delta in ``data``; kind "undecodable" (and the error) if it is not one."""
    try:
        delta = tflux.decode_delta(data)
    except (TfluxError, ValueError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        return {
            "kind": "undecodable",
            "error": message,
            "offset": getattr(exc, "offset", None),
            "length": len(data),
            "data": data.hex(),
        }
    kind = delta.kind
    fields: dict[str, Any] = {"kind": kind, "queue": delta.queue}
    if kind == "create_queue":
        fields["implementation"] = _implementation(delta.implementation)
        fields["max_size"] = delta.max_queue_size
        fields["max_message_size"] = delta.max_message_size
        fields["key_range"] = list(delta.key_range) if delta.key_range is not None else None
    elif kind in ("add_record", "add_later"):
        message = delta.message or b""
        fields["key"] = delta.key
        if kind == "add_later":
            fields["not_before"] = delta.due
        fields["message_length"] = len(message)
        fields["message"] = _preview(message, None if full else _PREVIEW)
        if b64:
            fields["message_b64"] = base64.b64encode(message).decode("ascii")
    elif kind in ("remove_record", "delivered"):
        fields["record_id"] = delta.record_id
    elif kind == "failed":
        fields["record_id"] = delta.record_id
        fields["due"] = delta.due
    elif kind == "purge":
        fields["kept_ids"] = delta.kept_ids
    elif kind == "queue_rules":
        # Only the rules the delta changes (``none``: cleared); spec section 12.
        for name, value in (delta.rules or {}).items():
            fields[name] = list(value) if name == "dead_letter" and value is not None else value
    return fields


def _quoted(text: str, backslashes: bool = True) -> str:
    if backslashes:
        text = text.replace("\\", "\\\\")
    return '"' + text.replace('"', '\\"') + '"'


def _text_value(key: str, value: Any) -> str:
    if value is None:
        return "none"
    if key == "kept_ids":
        return ",".join(map(str, value)) or "none"
    if key == "dead_letter":  # (queue, deliveries)
        return f"{_quoted(value[0])}:{value[1]}"
    if isinstance(value, list):
        return f"{value[0]}..{value[1]}"
    if key == "message":  # a preview: its backslashes are escapes already
        return _quoted(value, backslashes=False)
    if key in ("queue", "error"):
        return _quoted(value)
    return str(value)


def _dump_decoded_text(lsn: int, term: int, fields: dict[str, Any]) -> str:
    parts = [f"lsn={lsn}", f"term={term}"]
    parts += [f"{key}={_text_value(key, value)}" for key, value in fields.items()]
    return " ".join(parts) + "\n"


def _dump_decoded_json(lsn: int, term: int, fields: dict[str, Any]) -> str:
    return json.dumps({"lsn": lsn, "term": term, **fields}, separators=(",", ":")) + "\n"


@click.command(
    context_settings=CONTEXT_SETTINGS,
    short_help="Print the records of a log as decoded deltas, one per line (or JSON Lines).",
)
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (JSON Lines).")
@click.option("--from", "first", type=click.IntRange(min=0), help="First LSN to print.")
@click.option("--to", "last", type=click.IntRange(min=0), help="Last LSN to print (inclusive).")
@click.option(
    "--raw", is_flag=True, help="Print the raw bytes (lsn, term, length, crc, data), not deltas."
)
@click.option("--full", is_flag=True, help="Print whole messages, not their first 32 bytes.")
@click.option(
    "--encoding",
    type=click.Choice(sorted(_ENCODINGS)),
    default="hex",
    show_default=True,
    help="With --raw: how the data bytes are printed.",
)
@dialect_option
def dump(
    path: Path,
    as_json: bool,
    first: int | None,
    last: int | None,
    raw: bool,
    full: bool,
    encoding: str,
    dialect: str | None,
) -> None:
    """Print the records of a log, one line each: lsn, term and the decoded delta.

    PATH is a base directory (holding data/log), a log directory, or one segment file
    (NNN...N.log or .log.z: that segment alone). The log is opened read-only. When it does not
    open (a damaged sealed segment), each segment is read on its own: everything readable is
    printed, then what stopped each damaged segment, and the exit code is 1.

    Each line has lsn, term, kind (create_queue, delete_queue, add_record,
    remove_record; the task-queue kinds queue_rules, add_later, delivered, failed, purge)
    and queue ("" is the default queue), then by kind: implementation,
    max_size, max_message_size, key_range (none = no limit / no range); key, message_length
    and message (the first 32 bytes as text, other bytes as \\xNN, "..." when longer);
    record_id; add_later: not_before, failed: due (unix ms); purge: kept_ids; queue_rules:
    the rules it changes (dead_letter queue:deliveries, retry_delay_ms, retry_backoff in
    millionths, retry_max_delay_ms, lease_ms; none = cleared). Data that is not a delta is
    printed as kind=undecodable with the error and the bytes in hex, and makes the exit code
    1 once everything is printed.

    A channel directory (one with data/cursors) is always dumped raw.

    With --raw, each line is lsn, term, length, crc (the checksum stored in the record:
    CRC-32 in the spec dialect, CRC-32/MPEG-2 in the taskflux one, where the term is the
    record's Int64 field) and the data bytes (hex or base64), whatever they hold. With
    --json each line is a JSON object with the same keys, and add_record lines also carry
    message_b64: the whole message, base64 (message stays the preview; --full makes it the
    whole message as text, in both forms). Output stops
    quietly when the reader goes away (e.g. `| head`).

    \b
    Examples:
      tflux dump ./base | head
      tflux dump ./base/data/log --from 1000 --to 1009
      tflux dump ./base --json | jq 'select(.kind == "remove_record")'
      tflux dump ./base --raw --json --encoding base64 > records.jsonl

    \b
    Exit codes: 0 success, 1 a corrupt record or undecodable data was met, 2 usage or I/O error.
    """
    if first is not None and last is not None and first > last:
        raise CliError(f"--from {first} is after --to {last}")
    encode = _ENCODINGS[encoding]
    raw_line = _dump_line_json if as_json else _dump_line_text
    decoded_line = _dump_decoded_json if as_json else _dump_decoded_text
    bad: list[tuple[int, str]] = []  # (lsn, error) of undecodable records
    only: int | None = None  # PATH is one segment file: that segment alone (its first LSN)
    found = _located(path, dialect)  # the core says what PATH is (tflux.locate)
    if found.kind == "segment":
        only = found.segments[0]
        base = Path(found.base) if found.base is not None else None
        log_dir = Path(found.log)
    else:
        base, log_dir = _locate(path, dialect)
    if base is not None:  # the log alone is read, but a bad settings file is still worth a word
        _settings_for_reading(base)
        raw = raw or _is_channel(base)  # a channel's records are messages, not deltas
    dialect = found.dialect
    lines: list[str] = []
    if as_json:  # JSON Lines of records from here on: a failure adds no object of another shape
        _render.mark_json_said()
    write = sys.stdout.write

    def emit(entry: tflux.Entry) -> None:
        if raw:
            lines.append(raw_line(entry.lsn, entry.term, entry.data, encode))
        else:
            fields = _decoded(entry.data, full=full, b64=as_json)
            if fields["kind"] == "undecodable":
                bad.append((entry.lsn, fields["error"]))
            lines.append(decoded_line(entry.lsn, entry.term, fields))
        if len(lines) >= 1000:
            write("".join(lines))
            lines.clear()

    damage: list[str] = []  # what stopped a segment-by-segment read, in order
    try:
        if only is None:
            refused = _dump_log(log_dir, dialect, first, last, emit)
            if refused is not None:
                # Kafka's dump-log reads each file on its own: so does this, when the log as a
                # whole does not open (nothing was printed yet).
                exc = refused
                err.print(
                    f"note: the log does not open ({exc}); "
                    "what each segment holds is printed, then what stopped it"
                )
                damage = _dump_segments(log_dir, None, dialect, first, last, emit)
                if not damage:  # the damage is outside the range asked for: still said
                    damage = [f"{exc} (every record asked for was printed)"]
        else:
            damage = _dump_segments(log_dir, only, dialect, first, last, emit)
        write("".join(lines))
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return
    except TfluxError:
        write("".join(lines))  # what was read before the bad record, then the error
        sys.stdout.flush()
        raise
    if damage:
        more = f" (and {_plural(len(damage) - 1, 'more segment')})" if len(damage) > 1 else ""
        for problem in damage[1:]:
            err.print(f"error: {problem}")
        raise CliError(f"{damage[0]}{more}", EXIT_CORRUPT)
    if bad:
        lsn, message = bad[0]
        raise CliError(
            f"{_plural(len(bad), 'record')} could not be decoded as a delta "
            f"(first at LSN {lsn}: {message}); --raw prints the bytes",
            EXIT_CORRUPT,
        )


def _dump_log(
    log_dir: Path,
    dialect: str | None,
    first: int | None,
    last: int | None,
    emit: Callable[[tflux.Entry], None],
) -> CorruptionError | None:
    """Every entry of ``first..last`` of the log, opened whole (read-only); the error when the
    log does not open (before anything is emitted)."""
    try:
        whole = tflux.Log.open(log_dir, readonly=True, dialect=dialect)
    except CorruptionError as exc:
        return exc
    with whole as log:
        temp = Layout(log_dir.parent.parent, log.dialect, detect=False).temp.name
        torn = log.recovery
        if torn.truncated:  # said, not hidden (issue 30 item 23); the records before it print
            err.print(
                f"note: {torn.cut_path} ends in a torn tail at offset {torn.cut_offset} "
                f"({torn.reason}): {torn.bytes_cut:,} bytes after the last whole record are not "
                f"printed (the next writable open cuts them, keeping a copy in data/{temp})"
            )
        start = max(first if first is not None else 0, log.start_index)
        end = min(last + 1 if last is not None else log.last_index + 1, log.last_index + 1)
        if start >= end and (first is not None or last is not None):
            err.print(
                f"note: nothing in range; the log holds LSNs {log.start_index}..{log.last_index}"
            )
            return None
        for entry in log.entries(start, end):
            emit(entry)
    return None


def _dump_segments(
    log_dir: Path,
    only: int | None,
    dialect: str | None,
    first: int | None,
    last: int | None,
    emit: Callable[[tflux.Entry], None],
) -> list[str]:
    """The entries of ``first..last`` segment by segment (``only``: the segment starting at that
    LSN alone), each read on its own by the core (``tflux.open_segments``): a damaged segment
    gives the records before its damage. Returns what stopped each sealed segment that did not
    end cleanly, as the core classifies it (``tflux.verify``: what ``tflux verify`` says); the
    last segment's torn tail is a note, as for a whole log."""
    names = segment_names(str(log_dir))
    firsts = [start_lsn(name) for name in names]
    if only is not None and only not in firsts:
        raise CliError(f"{log_dir}: holds no segment starting at LSN {only}")
    damage: list[str] = []
    verdicts: list[tflux.Problem] | None = None  # the core's findings, read once when needed

    def classified(name: str, fallback: str) -> list[str]:
        nonlocal verdicts
        if verdicts is None:
            verdicts = [p for p in tflux.verify(log_dir, dialect=dialect).problems if p.fatal]
        said = [_damage_line(p) for p in verdicts if os.path.basename(p.path) == name]
        return said or [fallback]

    for i, name in enumerate(names):
        if only is not None and firsts[i] != only:
            continue
        seg_first = firsts[i]
        following = firsts[i + 1] if i + 1 < len(names) else None
        if last is not None and seg_first > last:
            break
        if first is not None and following is not None and following <= first:
            continue
        sealed = following is not None
        path = log_dir / name
        try:
            with tflux.open_segments(log_dir, [seg_first], dialect=dialect) as log:
                start = max(first if first is not None else 0, log.start_index)
                end = log.last_index + 1 if last is None else min(last + 1, log.last_index + 1)
                for entry in log.entries(start, end):
                    emit(entry)
                cut = log.recovery
                if cut.truncated:
                    where = f"{path} at offset {cut.cut_offset} ({cut.reason})"
                    if sealed:
                        damage += classified(name, f"corrupt {where}")
                    else:
                        err.print(f"note: {where} ends in a torn tail: not printed")
                elif sealed and log.last_index + 1 < following:
                    damage += classified(
                        name,
                        f"{path}: holds entries up to LSN {log.last_index}, the next segment "
                        f"starts at {following} (a gap)",
                    )
        except CorruptionError as exc:
            damage.append(str(exc))
    return damage


def _damage_line(problem: tflux.Problem) -> str:
    """One finding of the core as ``tflux verify`` words it, and what dump did about it."""
    where = problem.path if problem.offset is None else f"{problem.path} at offset {problem.offset}"
    kind = problem.kind.replace("_", " ")
    return f"{kind} in {where}: {problem.message}: the records after it are not printed"
