//! Walking a segment's records: the framing walk (length, CRC, end marker) every scan and read
//! shares, and where it stopped.

use std::fs::File;
use std::path::Path;

use crate::error::{IoContext, Result};
use crate::format::dialect::Dialect;
use crate::format::record::{self, with_framing, BadRecord, ChecksumRun, Frame, Framing};
use crate::format::segment as header;
use crate::io::mmap::map_readonly;

/// Where a scan stopped when it did not reach a clean end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanStop {
    /// End marker or physical end of file at a record boundary.
    Clean,
    /// A record that cannot be read: torn (last segment) or corrupt (sealed segment).
    Bad { offset: u64, reason: BadRecord },
    /// A complete record whose term is negative or lower than the one before it.
    Term {
        offset: u64,
        term: i32,
        previous: i32,
    },
}

impl ScanStop {
    pub fn offset(&self) -> Option<u64> {
        match self {
            ScanStop::Clean => None,
            ScanStop::Bad { offset, .. } | ScanStop::Term { offset, .. } => Some(*offset),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            ScanStop::Clean => "clean".into(),
            ScanStop::Bad { reason, .. } => reason.to_string(),
            ScanStop::Term { term, previous, .. } if *term < 0 => {
                format!("negative term {term} (previous {previous})")
            }
            ScanStop::Term { term, previous, .. } => {
                format!("term {term} lower than the previous record's term {previous}")
            }
        }
    }
}

/// What the stop of a walk over a segment's records means: the one rule of a segment's end,
/// for the scan at open (recovery, verify) and for a reader following a segment as it is
/// written (a channel's receivers). Only the last segment can end torn: its writer may have
/// been cut, or may still be writing; in a sealed one every record is final.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndOfRecords {
    /// An end marker, or the end of the bytes at a record boundary.
    Clean,
    /// A record not completely written (the last segment only): what is wrong with it.
    Torn(String),
    /// A complete record whose term is negative or goes down.
    TermOrder(String),
    /// A record that cannot be read in a sealed segment.
    Corrupt(String),
}

/// Classifies `stop`, a walk's stop over `bytes` (its offsets index `bytes`), in the last
/// segment or a sealed one.
pub fn end_of_records(
    dialect: Dialect,
    bytes: &[u8],
    stop: &ScanStop,
    is_last: bool,
) -> EndOfRecords {
    match stop {
        ScanStop::Clean => EndOfRecords::Clean,
        ScanStop::Term { .. } if is_last && is_torn_header(dialect, bytes, stop) => {
            EndOfRecords::Torn("record header never completed".into())
        }
        ScanStop::Bad { reason, .. } if is_last => EndOfRecords::Torn(reason.to_string()),
        ScanStop::Term { .. } => EndOfRecords::TermOrder(stop.describe()),
        ScanStop::Bad { .. } => EndOfRecords::Corrupt(stop.describe()),
    }
}

/// Whether a term stop met a torn header: a record marker followed by nothing but zeros reads
/// as an empty record of term 0. That cannot be a real record where it stops the walk (its term
/// would go down), so it is a write cut short, not damage. Only the spec's term field can read
/// as a decreasing 0.
pub fn is_torn_header(dialect: Dialect, bytes: &[u8], stop: &ScanStop) -> bool {
    dialect == Dialect::Spec
        && matches!(stop, ScanStop::Term { offset, term: 0, .. } if zero_from(bytes, *offset + 4))
}

/// Whether the empty record at `at` has nothing but zeros after its term in `bytes`: a genuine
/// empty record, or a header torn after its term (the two are identical on disk where the
/// dialect's checksum of nothing is zero). The caller knows the record at `at` is empty.
pub fn is_ambiguous_empty_record(dialect: Dialect, bytes: &[u8], at: usize) -> bool {
    with_framing!(dialect, F => F::EMPTY_CHECKSUM_IS_ZERO && zero_from(bytes, (at + F::CRC_AT) as u64))
}

fn zero_from(bytes: &[u8], offset: u64) -> bool {
    let from = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    bytes[from..].iter().all(|&b| b == 0)
}

/// One step of the scanner's walk ([`scan_records_in`]'s rules for one record: framing,
/// checksum, term order): the record at `at` as `(term, data, offset after it)`, or where and
/// why a walk stops there. For a reader that takes records one at a time from bytes that grow.
/// Always inlined, as `record::parse_in` is: with the step and its caller out of line, the
/// follower received 64 B messages 1.1-1.2x slower (`benches/lab/receive_ab.py`).
#[inline(always)]
pub fn next_record(
    dialect: Dialect,
    buf: &[u8],
    at: usize,
    previous_term: i32,
) -> std::result::Result<(i32, &[u8], usize), ScanStop> {
    with_framing!(dialect, F => match record::parse_in::<F, true>(buf, at) {
        Frame::Record { term, data, next } if !term_goes_down(term, previous_term) => {
            Ok((term, data, next))
        }
        Frame::Record { term, .. } => Err(ScanStop::Term {
            offset: at as u64,
            term,
            previous: previous_term,
        }),
        Frame::End => Err(ScanStop::Clean),
        Frame::Bad(reason) => Err(ScanStop::Bad {
            offset: at as u64,
            reason,
        }),
    })
}

/// The scan's term rule: a term is never negative, nor below the term before it (one
/// comparison: after the first record the term before is never negative).
#[inline(always)]
fn term_goes_down(term: i32, previous_term: i32) -> bool {
    term < previous_term.max(0)
}

/// Walks the spec records of `buf` from offset 8, calling `visit(offset, term, data)` for each
/// good record. Stops at the end marker, the first bad record, or the first decreasing term.
/// Returns the offset just past the last good record and why it stopped.
#[inline]
pub fn scan_records<'a>(
    buf: &'a [u8],
    previous_term: i32,
    visit: impl FnMut(u64, i32, &'a [u8]),
) -> (u64, ScanStop) {
    scan_records_in::<record::Spec>(buf, header::HEADER_LEN, previous_term, visit)
}

/// [`scan_records`] of `dialect`'s records from the record at `at` (a record boundary;
/// `previous_term` is the term of the record before it).
#[inline]
pub fn scan_records_from<'a>(
    dialect: Dialect,
    buf: &'a [u8],
    at: usize,
    previous_term: i32,
    visit: impl FnMut(u64, i32, &'a [u8]),
) -> (u64, ScanStop) {
    with_framing!(dialect, F => scan_records_in::<F>(buf, at, previous_term, visit))
}

/// [`scan_records_from`] with the framing fixed at compile time.
#[inline]
pub fn scan_records_in<'a, F: Framing>(
    buf: &'a [u8],
    mut at: usize,
    mut previous_term: i32,
    mut visit: impl FnMut(u64, i32, &'a [u8]),
) -> (u64, ScanStop) {
    let mut checksums = F::checksum_run(buf);
    loop {
        prefetch_ahead(buf, at);
        // Framing first, then the checksum (the order `parse_in::<F, true>` checks them in),
        // through the run, which may do better knowing the records come in order.
        match record::parse_in::<F, false>(buf, at) {
            Frame::Record { term, data, next } => {
                let from = at + F::HEADER_LEN;
                let stored = F::stored_checksum(&buf[at..]);
                if let Err(reason) = checksums.check(from..from + data.len(), stored) {
                    let offset = at as u64;
                    return (offset, ScanStop::Bad { offset, reason });
                }
                if term_goes_down(term, previous_term) {
                    let stop = ScanStop::Term {
                        offset: at as u64,
                        term,
                        previous: previous_term,
                    };
                    return (at as u64, stop);
                }
                visit(at as u64, term, data);
                previous_term = term;
                at = next;
            }
            Frame::End => return (at as u64, ScanStop::Clean),
            Frame::Bad(reason) => {
                return (
                    at as u64,
                    ScanStop::Bad {
                        offset: at as u64,
                        reason,
                    },
                )
            }
        }
    }
}

/// How far ahead of the record being checked the walk asks for bytes: the next record's offset
/// comes from this record's length field, so without a hint each record's first bytes are
/// waited for in turn (and the hardware's prefetcher stops at every page boundary). About a
/// dozen 64-byte records, or one 1 KiB record, ahead.
const PREFETCH_DISTANCE: usize = 1024;

/// Asks the CPU to start loading the bytes `PREFETCH_DISTANCE` past `at`: a hint, with no effect
/// on what the walk reads or finds. `perf` of verify on 64 B records had 31% of the framing's
/// samples on the wait for a record's last word.
#[inline(always)]
fn prefetch_ahead(buf: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // Not bounds-checked: an address past the end is only a wasted hint (no dereference,
        // so `wrapping_add` needs no bound either).
        let ahead = buf
            .as_ptr()
            .wrapping_add(at.wrapping_add(PREFETCH_DISTANCE));
        // SAFETY: a prefetch reads nothing and never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (buf, at);
}

/// Offset of the record `steps` records after the one at `at`, following the headers' lengths.
/// `None` when a header is missing or a length runs past the bytes: the file changed under a
/// read-only reader (another process truncated it), or was damaged since it was scanned.
pub(super) fn walk_in(dialect: Dialect, bytes: &[u8], at: usize, steps: usize) -> Option<usize> {
    with_framing!(dialect, F => walk::<F>(bytes, at, steps))
}

/// Byte offset of record `index` (0-based) of the plain segment file at `path`, following the
/// framing of `dialect` from the file header: where the CLI says a record starts. `None` when
/// the file holds fewer whole records, or is not a regular file (never opened then: a FIFO
/// would block).
pub fn record_offset_in_file(path: &Path, dialect: Dialect, index: usize) -> Result<Option<u64>> {
    if !std::fs::metadata(path).ctx("stat segment", path)?.is_file() {
        return Ok(None);
    }
    let file = File::open(path).ctx("open segment", path)?;
    let len = file.metadata().ctx("stat segment", path)?.len();
    let map = map_readonly(&file, len).ctx("map segment", path)?;
    let bytes = map.as_deref().unwrap_or(&[]);
    Ok(walk_in(dialect, bytes, header::HEADER_LEN, index).map(|at| at as u64))
}

/// [`walk_in`] with the framing fixed at compile time.
fn walk<F: Framing>(bytes: &[u8], mut at: usize, steps: usize) -> Option<usize> {
    for _ in 0..steps {
        let header = bytes.get(at..at.checked_add(F::HEADER_LEN)?)?;
        if header[..4] != record::RECORD_MARKER {
            return None;
        }
        at = at.checked_add(F::record_len(F::data_len(header)))?;
        if at > bytes.len() {
            return None;
        }
    }
    Some(at)
}

/// The walk over the records `from..=to` (of a segment whose first LSN is `first_lsn`) laid
/// out in `bytes` from index `at`: frames each record (and checks its CRC when `CRC`) and hands
/// it to `step` with its index in `bytes`. `Err((index, reason))` names a missing or damaged
/// record, or the reason `step` refused one; `Ok(false)` when `step` stopped the walk.
/// `Segment::walk` turns the failure into an error naming the file; a bulk read walking parts
/// of segments on other threads does so afterwards ([`super::Segment::unreadable_at`]).
pub fn walk_frames<F: Framing, const CRC: bool>(
    bytes: &[u8],
    at: usize,
    first_lsn: i64,
    from: i64,
    to: i64,
    step: impl FnMut(i64, i32, &[u8], usize) -> std::result::Result<bool, String>,
) -> std::result::Result<bool, (usize, String)> {
    walk_frames_by(
        record::parse_in::<F, CRC>,
        bytes,
        at,
        first_lsn,
        from,
        to,
        step,
    )
}

/// [`walk_frames`] checking only the framing ([`record::parse_framing`]): for the replay right
/// after open, over bytes the scan at open accepted whole. It asks for the bytes ahead as the
/// scan does (`prefetch_ahead`): the scan read them long before, and at 1 KiB the wait for
/// each record's header was most of the replay's walk.
pub fn walk_framing<F: Framing>(
    bytes: &[u8],
    at: usize,
    first_lsn: i64,
    from: i64,
    to: i64,
    step: impl FnMut(i64, i32, &[u8], usize) -> std::result::Result<bool, String>,
) -> std::result::Result<bool, (usize, String)> {
    let parse = |b, at| {
        prefetch_ahead(b, at);
        record::parse_framing_in::<F>(b, at)
    };
    walk_frames_by(parse, bytes, at, first_lsn, from, to, step)
}

#[inline(always)]
fn walk_frames_by<'b>(
    parse: impl Fn(&'b [u8], usize) -> Frame<'b>,
    bytes: &'b [u8],
    mut at: usize,
    first_lsn: i64,
    from: i64,
    to: i64,
    mut step: impl FnMut(i64, i32, &[u8], usize) -> std::result::Result<bool, String>,
) -> std::result::Result<bool, (usize, String)> {
    for lsn in from..=to {
        let reason = match parse(bytes, at) {
            Frame::Record { term, data, next } => match step(lsn, term, data, at) {
                Ok(true) => {
                    at = next;
                    continue;
                }
                Ok(false) => return Ok(false),
                Err(reason) => reason,
            },
            Frame::End => format!("record {lsn} vanished (segment starts at {first_lsn})"),
            Frame::Bad(reason) => reason.to_string(),
        };
        return Err((at, reason));
    }
    Ok(true)
}

/// Where [`super::Segment::copy_into`] puts records: each record's data is appended to `data()` and
/// checked there, then `push` takes its LSN and term.
pub trait RecordSink {
    /// Whether to copy the record at `lsn` carrying `len` data bytes (false stops the copy).
    fn admit(&mut self, lsn: i64, len: usize) -> bool;
    /// The buffer the next record's data is appended to.
    fn data(&mut self) -> &mut Vec<u8>;
    /// The record's data (the tail of `data()`) is in place and checked; false stops after it.
    fn push(&mut self, lsn: i64, term: i32) -> bool;
}

/// [`Segment::visit`] of a read-only log: each record's data through one reused buffer.
pub(super) struct Scratch<A, F> {
    pub(super) data: Vec<u8>,
    pub(super) admit: A,
    pub(super) f: F,
}

impl<A: FnMut(i64, usize) -> bool, F: FnMut(i64, i32, &[u8]) -> bool> RecordSink for Scratch<A, F> {
    fn admit(&mut self, lsn: i64, len: usize) -> bool {
        (self.admit)(lsn, len)
    }

    fn data(&mut self) -> &mut Vec<u8> {
        self.data.clear();
        &mut self.data
    }

    fn push(&mut self, lsn: i64, term: i32) -> bool {
        (self.f)(lsn, term, &self.data)
    }
}
