//! Delta decoding on arbitrary bytes: never panics; whatever decodes re-encodes to exactly the
//! same bytes (a delta consumes its data exactly, so decoding is injective).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tflux_core::format::delta;

fuzz_target!(|data: &[u8]| {
    match delta::decode(data) {
        Ok(d) => {
            assert_eq!(d.to_bytes(), data, "decode/encode round trip");
            assert_eq!(d.encoded_len(), data.len());
            let owned = d.to_delta();
            assert_eq!(owned.encode(), data);
        }
        Err(e) => assert!(
            e.offset <= data.len(),
            "error offset {} past the data",
            e.offset
        ),
    }
});
