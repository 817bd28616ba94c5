//! Metadata decoding on arbitrary bytes: never panics; what decodes re-encodes to the same
//! 20 bytes.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tflux_core::format::metadata;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = metadata::decode(data, Path::new("fuzz.metadata")) {
        assert_eq!(metadata::encode(&m).as_slice(), data);
    }
});
