//! The in-memory record index of a segment: sparse offsets of sealed segments, every offset
//! where random reads paid for it, and the runs of equal terms.

/// Records between two remembered offsets in a sealed segment's index. Finding a record walks
/// at most this many headers in the memory map; the index costs 8 / 8 = 1 byte per record
/// instead of 8 (the log's only per-record memory, until something reads the segment at random:
/// `Segment::index_every_record`).
pub(super) const SEALED_STRIDE: usize = 8;

/// The stride of [`RecordIndex::counting`]: no segment holds this many records.
const COUNTING_STRIDE: usize = 1 << (usize::BITS - 1);

/// Small reads of a sealed segment of `records` records after which its full offsets are built
/// ([`super::Segment::note_random_read`]).
pub fn reads_before_full_offsets(records: usize) -> usize {
    (records / 32).max(1)
}

/// Start offsets of the records of one segment and the runs of equal terms. Dense (every
/// record) for the active segment, which is read with positioned reads; sparse (every
/// `SEALED_STRIDE`-th record) for sealed segments, which are memory-mapped.
#[derive(Debug, Clone)]
pub struct RecordIndex {
    /// Offset of record `k * stride` at position `k`.
    offsets: Vec<u64>,
    stride: usize,
    len: usize,
    /// `(first record index, term)` for each run of equal terms, ascending.
    term_runs: Vec<(usize, i32)>,
}

impl Default for RecordIndex {
    fn default() -> Self {
        RecordIndex {
            offsets: Vec::new(),
            stride: 1,
            len: 0,
            term_runs: Vec::new(),
        }
    }
}

impl RecordIndex {
    /// An empty index that remembers every `stride`-th offset (a power of two): the scan of a
    /// sealed segment builds it directly instead of a dense one to thin out when it seals.
    pub fn sparse(stride: usize) -> RecordIndex {
        debug_assert!(stride.is_power_of_two());
        RecordIndex {
            stride,
            ..RecordIndex::default()
        }
    }

    /// An index that counts records and keeps their terms but remembers only the first offset:
    /// a sealed segment that nothing reads after its scan (`verify`). It stays a correct index,
    /// since finding a record walks from the remembered one, but that walk is the whole segment.
    pub fn counting() -> RecordIndex {
        RecordIndex::sparse(COUNTING_STRIDE)
    }

    /// Adds the next record (offsets of a sparse index only at multiples of its stride).
    #[inline]
    pub fn push(&mut self, offset: u64, term: i32) {
        if self.term_runs.last().is_none_or(|&(_, t)| t != term) {
            self.term_runs.push((self.len, term));
        }
        if self.len & (self.stride - 1) == 0 {
            self.offsets.push(offset);
        }
        self.len += 1;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_dense(&self) -> bool {
        self.stride == 1
    }

    /// Offset of record `i` (dense index). Checked in release builds too: a sparse index would
    /// answer with some other record's offset, silently.
    pub fn offset(&self, i: usize) -> u64 {
        assert!(
            self.is_dense(),
            "offset of a record asked of a sparse index"
        );
        self.offsets[i]
    }

    /// The remembered record at or before `i`: `(its index, its offset)`.
    pub(super) fn anchor(&self, i: usize) -> (usize, u64) {
        let k = i / self.stride;
        (k * self.stride, self.offsets[k])
    }

    pub fn term(&self, i: usize) -> i32 {
        let run = self.term_runs.partition_point(|&(first, _)| first <= i);
        self.term_runs[run - 1].1
    }

    pub fn last_term(&self) -> Option<i32> {
        self.term_runs.last().map(|&(_, t)| t)
    }

    /// Number of records that start before `offset` (dense index).
    pub fn iter_until(&self, offset: u64) -> usize {
        assert!(self.is_dense(), "record count asked of a sparse index");
        self.offsets.partition_point(|&o| o < offset)
    }

    pub fn truncate(&mut self, len: usize) {
        let len = len.min(self.len);
        self.offsets.truncate(len.div_ceil(self.stride));
        self.len = len;
        let runs = self.term_runs.partition_point(|&(first, _)| first < len);
        self.term_runs.truncate(runs);
    }

    /// Keeps every `stride`-th offset (the segment became sealed).
    pub(super) fn sparsify(&mut self, stride: usize) {
        if self.is_dense() && stride > 1 {
            self.offsets = self.offsets.iter().copied().step_by(stride).collect();
            self.stride = stride;
        }
    }
}
