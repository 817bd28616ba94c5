//! An AddRecord refused because its queue's last id is already 2^64 - 1 keeps nothing: no
//! bytes of its message (online, or in a restore's batch, copied or borrowed from a segment's
//! bytes) and no count of the bytes it would have borrowed from. Measured with a counting
//! allocator (this test binary's own, per thread, so other tests' threads do not count).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use tflux_core::format::delta::Delta;
use tflux_core::format::snapshot::{QueueData, Snapshot};
use tflux_core::segment::bytes::SegmentBytes;
use tflux_core::state::{QueueState, IMPL_ARRAY, IMPL_HEAP};

struct Counting;

thread_local! {
    /// Bytes allocated and not freed by this thread (frees of another thread's allocations
    /// count here too: the tests below free on the thread that allocates).
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    // `try_with`: nothing to count while the thread's storage is being torn down.
    let _ = LIVE.try_with(|l| l.set(l.get() + delta));
}

// SAFETY: every call is passed on to the system allocator unchanged; the counter only reads
// the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.with(Cell::get)
}

/// A queue (the default one, or `q`) whose last id is 2^64 - 1, holding that record.
fn full_state(implementation: i32) -> QueueState {
    let queue = |name: &[u8]| QueueData {
        name: name.to_vec(),
        implementation,
        last_id: u64::MAX,
        max_queue_size: -1,
        max_message_size: -1,
        key_range: (implementation == IMPL_ARRAY).then_some((0, 100)),
        records: vec![(u64::MAX, 0, b"last".to_vec())],
    };
    let snap = Snapshot {
        last_index: 0,
        last_term: 1,
        queues: vec![queue(b""), queue(b"q")],
    };
    QueueState::from_snapshot(&snap).unwrap()
}

const MESSAGE: usize = 1 << 20;

fn add(name: &[u8]) -> Vec<u8> {
    Delta::AddRecord {
        name: name.to_vec(),
        key: 7,
        message: vec![0xAB; MESSAGE],
    }
    .encode()
}

/// How the refused add is applied.
#[derive(Debug, Clone, Copy)]
enum How {
    Online,
    Batch,
    /// In a batch, the delta lying inside a segment's bytes (its message borrowable).
    BatchInSource,
}

/// Applies `deltas` (all refused) `rounds` times to a full state; returns the bytes this thread
/// still holds afterwards beyond what it held before (the state, the deltas and the source
/// dropped), and the holders of the source left once everything but the test's own is gone.
fn refused_adds(how: How, implementation: i32, name: &[u8], rounds: usize) -> (isize, usize) {
    let deltas = add(name);
    let source = SegmentBytes::owned(deltas.clone());
    let before = live();
    let mut state = full_state(implementation);
    for _ in 0..rounds {
        let refused = match how {
            How::Online => state.apply(Some(1), &deltas).unwrap_err(),
            How::Batch => state.batch().apply(Some(1), &deltas).unwrap_err(),
            How::BatchInSource => {
                let mut batch = state.batch();
                // The queue the last delta named first (the batch's fast path), then another.
                batch
                    .apply_in_source(Some(1), &source, Some(&source))
                    .unwrap_err()
            }
        };
        assert!(refused.to_string().contains("used every id"), "{refused}");
    }
    for q in [&b""[..], b"q"] {
        let q = state.queue(q).unwrap();
        assert_eq!((q.last_id(), q.count()), (u64::MAX, 1));
    }
    drop(state);
    (live() - before, source.holders())
}

#[test]
fn a_refused_add_keeps_no_bytes_of_its_message_nor_a_count_of_its_source() {
    // The counter sees this thread's allocations only; first make sure it sees them at all.
    let before = live();
    let held = vec![1u8; MESSAGE];
    assert!(live() - before >= MESSAGE as isize);
    drop(held);
    assert_eq!(live(), before);
    for how in [How::Online, How::Batch, How::BatchInSource] {
        for implementation in [IMPL_HEAP, IMPL_ARRAY] {
            for name in [&b""[..], b"q"] {
                let (kept, holders) = refused_adds(how, implementation, name, 3);
                let what = format!("{how:?} implementation {implementation} queue {name:?}");
                assert_eq!(kept, 0, "{what}: bytes kept after 3 refused adds");
                assert_eq!(holders, 1, "{what}: holders of the source");
            }
        }
    }
}
