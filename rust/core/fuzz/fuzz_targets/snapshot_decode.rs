//! Snapshot decoding on arbitrary bytes: never panics or allocates by an untrusted count; what
//! decodes re-encodes and decodes to the same value, and loads into a queue state without
//! panicking (it may refuse, e.g. a key outside an array queue's range).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tflux_core::format::snapshot;
use tflux_core::state::QueueState;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.snapshot");
    if let Ok(s) = snapshot::decode(data, path) {
        let bytes = snapshot::encode(&s).expect("a decoded snapshot must encode");
        let again = snapshot::decode(&bytes, path).expect("an encoded snapshot must decode");
        assert_eq!(again, s);
        if let Ok(state) = QueueState::from_snapshot(&s) {
            let back = state.to_snapshot(s.last_index, s.last_term);
            assert_eq!(back.queues.len(), s.queues.len());
        }
    }
});
