//! What the bytes of one file say about the dialect it is written in (spec section 11). Pure
//! bytes: `crate::log::dialect` reads the files and decides for the directory.
//!
//! A file says a dialect only when its bytes fit that dialect and not the other, checksum
//! included: a record that parses completely under one framing; a snapshot whose length field
//! accounts for the file's length under one header (and whose checksum matches, when the whole
//! file is at hand); a metadata file of one of the two lengths with that layout's checksum. A
//! damaged file says nothing, so damage is reported as damage, never as another dialect.

use super::dialect::Dialect;
use super::record::{padding, RECORD_MARKER};
use super::snapshot::{
    MARKER as SNAPSHOT_MARKER, TASK_MARKER as SNAPSHOT_TASK_MARKER,
    WIDE_MARKER as SNAPSHOT_WIDE_MARKER,
};
use crate::codec::{be_i32, be_u32, crc32, crc32_mpeg2, crc32_of};

/// What one file said, and why, in words for an error message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Says {
    pub dialect: Dialect,
    pub why: &'static str,
}

/// Bytes of the first record's header to read before its data, under either framing.
pub const RECORD_PROBE_HEADER: usize = 20;

/// What the first record of a log says: `bytes` start at the record (segment offset 8) and
/// reach at least to the end of its data (fewer bytes only ever say nothing). `None` when the
/// record parses under neither framing (damage, or no record: the end marker) or under both.
pub fn first_record_says(bytes: &[u8]) -> Option<Says> {
    match (spec_record_parses(bytes), taskflux_record_parses(bytes)) {
        (true, false) => Some(Says {
            dialect: Dialect::Spec,
            why: "its first record has an Int32 term, zero padding and a CRC-32 (zlib) checksum",
        }),
        (false, true) => Some(Says {
            dialect: Dialect::Taskflux,
            why: "its first record has an Int64 term, no padding and a CRC-32/MPEG-2 checksum",
        }),
        _ => None,
    }
}

/// How many bytes from the first record's start [`first_record_says`] needs: the longer of
/// the two framings' reach for the lengths the header holds, leaving out a framing whose record
/// would end past `available` (it cannot parse, so reading towards it decides nothing). Under
/// the other framing a length field holds data bytes (in a spec record, the delta's marker
/// byte makes it at least 0x41000000), so capping that reach at `available` instead read
/// every segment whole to decide its dialect.
pub fn first_record_reach(header: &[u8], available: u64) -> u64 {
    let spec = be_i32(header, 12).map_or(0, |len| 16 + len.max(0) as u64 + 3);
    let taskflux = be_i32(header, 16).map_or(0, |len| 20 + len.max(0) as u64);
    [spec, taskflux]
        .into_iter()
        .filter(|&reach| reach <= available)
        .fold(RECORD_PROBE_HEADER as u64, u64::max)
        .min(available)
}

/// Where the record after a damaged first one starts (from the first record's start) if the
/// first one's length field, read under `dialect`'s framing, is right: a first record damaged
/// elsewhere (its data, its checksum) still says where the second one is. `None` when the
/// length field is negative or not in `header`.
pub fn second_record_at(header: &[u8], dialect: Dialect) -> Option<u64> {
    match dialect {
        Dialect::Spec => be_i32(header, 12)
            .filter(|&len| len >= 0)
            .map(|len| 16 + len as u64 + padding(len as usize) as u64),
        Dialect::Taskflux => be_i32(header, 16)
            .filter(|&len| len >= 0)
            .map(|len| 20 + len as u64),
    }
}

/// What a record found at [`second_record_at`] under `dialect` says: that dialect, when the
/// record there parses under that framing and not the other (`bytes` start at it).
pub fn second_record_says(bytes: &[u8], dialect: Dialect) -> Option<Says> {
    let says = first_record_says(bytes)?;
    (says.dialect == dialect).then_some(Says {
        dialect,
        why: match dialect {
            Dialect::Spec => {
                "its first record is damaged, but the spec framing's length of it leads to a \
                 second record with an Int32 term, zero padding and a CRC-32 (zlib) checksum"
            }
            Dialect::Taskflux => {
                "its first record is damaged, but the taskflux framing's length of it leads to \
                 a second record with an Int64 term, no padding and a CRC-32/MPEG-2 checksum"
            }
        },
    })
}

/// Whether a record marker occurs in `bytes` (which start at the first record) after the first
/// record's own four bytes: evidence of a record after it, in either framing (TaskFlux's
/// records are unpadded, so a marker may start at any offset).
pub fn has_record_marker_after_first(bytes: &[u8]) -> bool {
    bytes
        .get(4..)
        .is_some_and(|rest| rest.windows(4).any(|w| w == RECORD_MARKER))
}

/// Whether `bytes` start with one whole record of the spec's framing, checksum included.
fn spec_record_parses(bytes: &[u8]) -> bool {
    let (Some(term), Some(crc), Some(len)) =
        (be_i32(bytes, 4), be_u32(bytes, 8), be_i32(bytes, 12))
    else {
        return false;
    };
    if bytes[..4] != RECORD_MARKER || term < 0 || len < 0 {
        return false;
    }
    let len = len as usize;
    let Some(data) = bytes.get(16..16 + len) else {
        return false;
    };
    let Some(pad) = bytes.get(16 + len..16 + len + padding(len)) else {
        return false;
    };
    pad.iter().all(|&b| b == 0) && crc32(data) == crc
}

/// Whether `bytes` start with one whole record of TaskFlux's framing, checksum included.
fn taskflux_record_parses(bytes: &[u8]) -> bool {
    let (Some(term_hi), Some(term_lo), Some(crc), Some(len)) = (
        be_u32(bytes, 4),
        be_u32(bytes, 8),
        be_u32(bytes, 12),
        be_i32(bytes, 16),
    ) else {
        return false;
    };
    let term = ((term_hi as u64) << 32 | term_lo as u64) as i64;
    if bytes[..4] != RECORD_MARKER || term < 1 || len < 0 {
        return false;
    }
    let Some(data) = bytes.get(20..20 + len as usize) else {
        return false;
    };
    crc32_mpeg2(data) == crc
}

/// The metadata file's marker (both dialects).
const METADATA_MARKER: [u8; 4] = [0x5A, 0x6E, 0xA0, 0x12];

/// What a metadata file says from its bytes (at most 24 are needed; an empty file says
/// nothing: nothing written yet): the dialect whose length it has, when its marker and that
/// layout's checksum (of bytes 4 to the checksum) are right.
pub fn metadata_says(bytes: &[u8]) -> Option<Says> {
    let dialect = Dialect::ALL
        .into_iter()
        .find(|d| d.metadata_len() == bytes.len() as u64)?;
    let crc_at = bytes.len() - 4;
    let stored = be_u32(bytes, crc_at)?;
    let covered = &bytes[4..crc_at];
    let computed = match dialect {
        Dialect::Spec => crc32(covered),
        Dialect::Taskflux => crc32_mpeg2(covered),
    };
    (bytes[..4] == METADATA_MARKER && stored == computed).then_some(Says {
        dialect,
        why: match dialect {
            Dialect::Spec => "its metadata file is 20 bytes long",
            Dialect::Taskflux => "its metadata file is 24 bytes long",
        },
    })
}

/// Bytes of a snapshot's head [`snapshot_says`] reads.
pub const SNAPSHOT_PROBE: usize = 24;

/// The smallest state a snapshot can hold: the queue count and the default queue (empty name,
/// no range, no records), which every state has.
const MIN_STATE_LEN: i32 = 4 + 1 + 4 + 8 + 4 + 4 + 1 + 4;

/// What a snapshot file says from its first bytes `head` (the whole file when `head` is as long
/// as `file_len`: the checksum is then checked too) and its length: the wide marker is the
/// spec's (4.1), and so is the task layout's (spec 12, `B6 38 0F CB`, the wide header's
/// successor); under the shared marker, the header whose state length accounts for the file's
/// length exactly (the spec's 16-byte header or TaskFlux's 24-byte one, then a state at least
/// as long as the default queue's, then a 4-byte checksum). `None` for an empty file,
/// another marker, or neither or both.
pub fn snapshot_says(head: &[u8], file_len: u64) -> Option<Says> {
    let marker = head.get(..4)?;
    if marker == SNAPSHOT_WIDE_MARKER {
        return Some(Says {
            dialect: Dialect::Spec,
            why: "its snapshot has the wide header (B6 38 0F CA)",
        });
    }
    if marker == SNAPSHOT_TASK_MARKER {
        return task_layout_fits(head, file_len).then_some(Says {
            dialect: Dialect::Spec,
            why: "its snapshot has the task layout (B6 38 0F CB)",
        });
    }
    if marker != SNAPSHOT_MARKER {
        return None;
    }
    let whole = head.len() as u64 == file_len;
    let fits = |len_at: usize, crc: fn(&[u8]) -> u32| {
        be_i32(head, len_at).is_some_and(|len| {
            let state_at = len_at + 4;
            let lengths = len >= MIN_STATE_LEN && state_at as u64 + len as u64 + 4 == file_len;
            lengths
                && (!whole || {
                    let state = &head[state_at..state_at + len as usize];
                    be_u32(head, state_at + len as usize) == Some(crc(state))
                })
        })
    };
    match (fits(12, crc32), fits(20, crc32_mpeg2)) {
        (true, false) => Some(Says {
            dialect: Dialect::Spec,
            why: "its snapshot has an Int32 index and term",
        }),
        (false, true) => Some(Says {
            dialect: Dialect::Taskflux,
            why: "its snapshot has an Int64 index and term",
        }),
        _ => None,
    }
}

/// Whether a snapshot under the task marker has the task layout's lengths (spec 12: the wide
/// header, a state Buffer at least as long as the default queue's, a tasks Buffer and a
/// checksum ending the file) and, when the whole file is at hand, its checksum. The marker
/// alone is one bit from TaskFlux's shared one (`C9` and `CB`), and a damaged TaskFlux snapshot
/// must say nothing: its state length leaves no room for the tasks Buffer.
fn task_layout_fits(head: &[u8], file_len: u64) -> bool {
    let Some(state_len) = be_i32(head, 20).filter(|&n| n >= MIN_STATE_LEN) else {
        return false;
    };
    let tasks_len_at = 24 + state_len as u64;
    if tasks_len_at + 8 > file_len {
        return false;
    }
    if head.len() as u64 != file_len {
        return true; // a large snapshot: its own reader checks the rest
    }
    let at = tasks_len_at as usize;
    let Some(tasks_len) = be_i32(head, at).filter(|&m| m >= 0) else {
        return false;
    };
    let (tasks_at, crc_at) = (at + 4, at + 4 + tasks_len as usize);
    crc_at as u64 + 4 == file_len
        && be_u32(head, crc_at)
            == Some(crc32_of(&[
                &head[4..20],
                &head[24..at],
                &head[tasks_at..crc_at],
            ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::record;
    use proptest::prelude::*;

    /// A spec segment's first record read as taskflux has a length field of data bytes (the
    /// delta marker first: here 'A', 0x41...), past any segment: the probe reads the spec
    /// record only, not the whole file.
    #[test]
    fn the_probe_reads_no_further_than_a_framing_that_can_parse() {
        let mut rec = Vec::new();
        record::encode(&mut rec, 3, b"A\x01q\x00\x00\x00\x00\x00\x00\x00\x05x\x00");
        let available = 17 << 20;
        let reach = first_record_reach(&rec[..RECORD_PROBE_HEADER], available);
        assert_eq!(reach, rec.len() as u64);
        assert_eq!(
            first_record_says(&rec[..reach as usize]).map(|s| s.dialect),
            Some(Dialect::Spec)
        );
        // Both lengths past what the file holds: the header alone.
        let header = [0x7f; RECORD_PROBE_HEADER];
        assert_eq!(
            first_record_reach(&header, 1000),
            RECORD_PROBE_HEADER as u64
        );
    }

    fn taskflux_record(term: i64, data: &[u8]) -> Vec<u8> {
        let mut out = RECORD_MARKER.to_vec();
        out.extend_from_slice(&term.to_be_bytes());
        out.extend_from_slice(&crc32_mpeg2(data).to_be_bytes());
        out.extend_from_slice(&(data.len() as i32).to_be_bytes());
        out.extend_from_slice(data);
        out
    }

    fn spec_record(term: i32, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        record::encode(&mut out, term, data);
        out
    }

    fn says(bytes: &[u8]) -> Option<Dialect> {
        first_record_says(bytes).map(|s| s.dialect)
    }

    #[test]
    fn a_record_says_the_dialect_whose_framing_and_checksum_it_has() {
        assert_eq!(says(&spec_record(1, b"C\x01q")), Some(Dialect::Spec));
        assert_eq!(
            says(&taskflux_record(1, b"C\x01q")),
            Some(Dialect::Taskflux)
        );
        // Followed by more records or zeros: the same.
        let mut two = taskflux_record(2, b"abc");
        two.extend(taskflux_record(2, b"defg"));
        assert_eq!(says(&two), Some(Dialect::Taskflux));
        let mut zeros = spec_record(0, b"");
        zeros.extend([0u8; 64]);
        assert_eq!(says(&zeros), Some(Dialect::Spec));
    }

    #[test]
    fn a_damaged_short_or_absent_record_says_nothing() {
        let mut bad = taskflux_record(1, b"payload");
        bad[22] ^= 1;
        assert_eq!(says(&bad), None);
        let whole = taskflux_record(1, b"payload");
        assert_eq!(says(&whole[..whole.len() - 1]), None);
        assert_eq!(says(&[0u8; 32]), None);
        assert_eq!(says(&[]), None);
        // TaskFlux's term is at least 1; a spec record's padding must be zero.
        assert_eq!(says(&taskflux_record(0, b"x")), None);
        let mut pad = spec_record(1, b"x");
        pad[17] = 1;
        assert_eq!(says(&pad), None);
    }

    #[test]
    fn the_reach_covers_the_record_under_either_framing() {
        for data in [&b""[..], b"x", b"four", &[7u8; 300]] {
            let t = taskflux_record(3, data);
            assert!(first_record_reach(&t, u64::MAX) >= t.len() as u64);
            let s = spec_record(3, data);
            assert!(first_record_reach(&s, u64::MAX) >= s.len() as u64);
        }
        // Never past what the file holds, whatever the length fields say: a framing whose
        // record would end past it is not read towards.
        let mut absurd = taskflux_record(1, b"x");
        absurd[16..20].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(first_record_reach(&absurd, 100) <= 100);
    }

    fn metadata(dialect: Dialect) -> Vec<u8> {
        let mut out = METADATA_MARKER.to_vec();
        out.extend(1i32.to_be_bytes());
        match dialect {
            Dialect::Spec => out.extend(2i32.to_be_bytes()),
            Dialect::Taskflux => out.extend(2i64.to_be_bytes()),
        }
        out.extend((-1i32).to_be_bytes());
        let crc = match dialect {
            Dialect::Spec => crc32(&out[4..]),
            Dialect::Taskflux => crc32_mpeg2(&out[4..]),
        };
        out.extend(crc.to_be_bytes());
        out
    }

    /// A snapshot holding the default queue only, in `dialect`'s layout.
    fn snapshot(dialect: Dialect) -> Vec<u8> {
        let mut state = 1i32.to_be_bytes().to_vec(); // one queue: the default one
        state.push(0); // empty name
        state.extend(1i32.to_be_bytes());
        state.extend(0u64.to_be_bytes());
        state.extend((-1i32).to_be_bytes());
        state.extend((-1i32).to_be_bytes());
        state.push(0); // no range
        state.extend(0i32.to_be_bytes()); // no records
        let mut out = SNAPSHOT_MARKER.to_vec();
        match dialect {
            Dialect::Spec => out.extend([7i32.to_be_bytes(), 1i32.to_be_bytes()].concat()),
            Dialect::Taskflux => out.extend([7i64.to_be_bytes(), 1i64.to_be_bytes()].concat()),
        }
        out.extend((state.len() as i32).to_be_bytes());
        out.extend(&state);
        let crc = match dialect {
            Dialect::Spec => crc32(&state),
            Dialect::Taskflux => crc32_mpeg2(&state),
        };
        out.extend(crc.to_be_bytes());
        out
    }

    /// `snapshot(Spec)`'s state in the task layout (spec 12) with an empty tasks array.
    fn task_snapshot() -> Vec<u8> {
        let narrow = snapshot(Dialect::Spec);
        let state = &narrow[16..narrow.len() - 4];
        let tasks = 0i32.to_be_bytes();
        let mut out = SNAPSHOT_TASK_MARKER.to_vec();
        out.extend(7i64.to_be_bytes());
        out.extend(1i64.to_be_bytes());
        out.extend((state.len() as i32).to_be_bytes());
        out.extend(state);
        out.extend((tasks.len() as i32).to_be_bytes());
        out.extend(tasks);
        out.extend(crc32_of(&[&out[4..20], state, &tasks]).to_be_bytes());
        out
    }

    #[test]
    fn the_task_layout_says_spec() {
        let t = task_snapshot();
        assert_eq!(
            snapshot_says(&t, t.len() as u64).map(|s| s.dialect),
            Some(Dialect::Spec)
        );
        assert_eq!(
            snapshot_says(&t[..SNAPSHOT_PROBE], t.len() as u64).map(|s| s.dialect),
            Some(Dialect::Spec)
        );
        // A TaskFlux snapshot whose marker lost one bit (C9 to CB) says nothing.
        let mut flipped = snapshot(Dialect::Taskflux);
        flipped[3] = 0xCB;
        assert_eq!(snapshot_says(&flipped, flipped.len() as u64), None);
        assert_eq!(
            snapshot_says(&flipped[..SNAPSHOT_PROBE], flipped.len() as u64),
            None
        );
    }

    #[test]
    fn metadata_and_snapshot_headers_say_their_dialect() {
        for d in Dialect::ALL {
            let m = metadata(d);
            assert_eq!(metadata_says(&m).map(|s| s.dialect), Some(d));
            let s = snapshot(d);
            assert_eq!(
                snapshot_says(&s, s.len() as u64).map(|s| s.dialect),
                Some(d)
            );
            // Only the head at hand (a large snapshot): the lengths decide.
            assert_eq!(
                snapshot_says(&s[..24], s.len() as u64).map(|s| s.dialect),
                Some(d)
            );
        }
        assert_eq!(metadata_says(&[]), None);
        assert_eq!(metadata_says(&[0; 21]), None);
        assert_eq!(snapshot_says(&[], 0), None);
        assert_eq!(
            snapshot_says(&SNAPSHOT_WIDE_MARKER, 100).map(|s| s.dialect),
            Some(Dialect::Spec)
        );
    }

    /// Damage never says the other dialect: every truncation, appended word and flipped bit of
    /// a metadata file or snapshot says its own dialect or nothing (the corruption sweep found
    /// a truncated spec snapshot read as a taskflux one).
    #[test]
    fn damage_never_says_the_other_dialect() {
        for d in Dialect::ALL {
            let mut files = vec![(metadata(d), true), (snapshot(d), false)];
            if d == Dialect::Spec {
                files.push((task_snapshot(), false));
            }
            for (file, is_metadata) in files {
                let mut variants: Vec<Vec<u8>> =
                    (0..file.len()).map(|n| file[..n].to_vec()).collect();
                for extra in [0u8, 1, 0xFF] {
                    variants.push([&file[..], &[extra; 4]].concat());
                }
                for at in 0..file.len() {
                    for bit in 0..8 {
                        let mut v = file.clone();
                        v[at] ^= 1 << bit;
                        variants.push(v);
                    }
                }
                for v in variants {
                    let said = if is_metadata {
                        metadata_says(&v)
                    } else {
                        snapshot_says(&v, v.len() as u64)
                    };
                    assert!(said.is_none_or(|s| s.dialect == d), "{d}: {v:02x?}");
                }
            }
        }
    }

    #[test]
    fn names_parse_back() {
        for d in Dialect::ALL {
            assert_eq!(Dialect::parse(d.name()).unwrap(), d);
        }
        assert!(Dialect::parse("csharp").is_err());
    }

    proptest! {
        /// Detection never picks the wrong dialect: a whole record of either framing, with
        /// any term, data and trailing bytes, says its own dialect.
        #[test]
        fn a_record_never_says_the_other_dialect(
            term in 1i64..=i64::MAX,
            data in proptest::collection::vec(any::<u8>(), 0..200),
            tail in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let mut t = taskflux_record(term, &data);
            t.extend(&tail);
            prop_assert_eq!(says(&t), Some(Dialect::Taskflux));
            let mut s = spec_record((term % (i32::MAX as i64)) as i32, &data);
            s.extend(&tail);
            prop_assert_eq!(says(&s), Some(Dialect::Spec));
        }
    }
}
