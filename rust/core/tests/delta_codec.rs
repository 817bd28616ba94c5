//! The delta codec (spec section 5): golden vectors (tests/data, written from the spec by an
//! independent encoder) decode exactly and encode byte-identically; truncated, extended and
//! flipped bytes are errors naming the field and its offset, never a panic; queue names are
//! validated; random deltas round-trip.

mod common;

use common::*;
use proptest::prelude::*;
use tflux_core::format::delta::{self, Delta, DeltaError, DeltaRef};

// ---------- deltas ----------

fn golden_deltas() -> Vec<(String, Delta, Vec<u8>)> {
    let text = std::fs::read_to_string(data_dir().join("deltas.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json.as_object()
        .unwrap()
        .iter()
        .map(|(label, v)| {
            let name = v["queue"].as_str().unwrap().as_bytes().to_vec();
            let delta = match v["kind"].as_str().unwrap() {
                "C" => Delta::CreateQueue {
                    name,
                    implementation: v["implementation"].as_i64().unwrap() as i32,
                    max_queue_size: v["max_queue_size"].as_i64().unwrap() as i32,
                    max_message_size: v["max_message_size"].as_i64().unwrap() as i32,
                    key_range: v["key_range"]
                        .as_array()
                        .map(|r| (r[0].as_i64().unwrap(), r[1].as_i64().unwrap())),
                },
                "D" => Delta::DeleteQueue { name },
                "A" => Delta::AddRecord {
                    name,
                    key: v["key"].as_i64().unwrap(),
                    message: unhex(v["message_hex"].as_str().unwrap()),
                },
                "R" => Delta::RemoveRecord {
                    name,
                    id: v["record_id"].as_u64().unwrap(),
                },
                k => panic!("unknown kind {k}"),
            };
            (label.clone(), delta, unhex(v["hex"].as_str().unwrap()))
        })
        .collect()
}

#[test]
fn golden_deltas_decode_exactly_and_encode_byte_identically() {
    let vectors = golden_deltas();
    assert_eq!(vectors.len(), 6);
    for (label, delta, bytes) in vectors {
        assert_eq!(delta::decode(&bytes).unwrap(), delta.as_ref(), "{label}");
        let mut out = Vec::new();
        delta.as_ref().encode(&mut out);
        assert_eq!(out, bytes, "{label}");
        assert_eq!(delta.as_ref().encoded_len(), bytes.len(), "{label}");
    }
}

#[test]
fn every_truncated_delta_is_an_error_within_its_bytes() {
    for (label, _, bytes) in golden_deltas() {
        for cut in 0..bytes.len() {
            let e = delta::decode(&bytes[..cut]).unwrap_err();
            assert!(e.offset <= cut, "{label} cut at {cut}: {e}");
            assert!(
                e.reason.contains("past the end"),
                "{label} cut at {cut}: {e}"
            );
        }
    }
}

#[test]
fn every_delta_with_an_extra_byte_reports_trailing_bytes() {
    for (label, _, mut bytes) in golden_deltas() {
        let end = bytes.len();
        bytes.push(0);
        let e = delta::decode(&bytes).unwrap_err();
        assert_eq!(e.offset, end, "{label}");
        assert!(e.reason.contains("1 trailing bytes after"), "{label}: {e}");
    }
}

#[test]
fn flipped_delta_bytes_never_panic() {
    for (_, _, bytes) in golden_deltas() {
        for i in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xFF] {
                let mut b = bytes.clone();
                b[i] ^= flip;
                if let Err(e) = delta::decode(&b) {
                    assert!(e.offset <= b.len());
                }
            }
        }
    }
}

#[test]
fn delta_errors_name_field_and_offset() {
    let cases: Vec<(Vec<u8>, usize, &str)> = vec![
        (vec![], 0, "delta marker runs past the end (0 bytes left)"),
        (b"Z".to_vec(), 0, "unknown delta marker 0x5A"),
        (
            b"D\x03a b".to_vec(),
            3,
            "queue name byte 0x20 at offset 3 is not in '!'..'~'",
        ),
        (
            b"D\x01\x7f".to_vec(),
            2,
            "queue name byte 0x7F at offset 2 is not in '!'..'~'",
        ),
        (
            b"D\x04ab".to_vec(),
            1,
            "queue name length 4 runs past the end (2 bytes left)",
        ),
        (
            [&b"A\x00"[..], &[0; 8], &[0x7F, 0xFF, 0xFF, 0xFF], b"hello"].concat(),
            10,
            "message length 2147483647 runs past the end (5 bytes left)",
        ),
        (
            [&b"A\x00"[..], &[0; 8], &[0xFF, 0xFF, 0xFF, 0xFF]].concat(),
            10,
            "message length -1 is negative",
        ),
        (
            [&b"R\x00"[..], &[0; 8], &[1, 2, 3]].concat(),
            10,
            "3 trailing bytes after RemoveRecord",
        ),
        (
            [&b"C\x00"[..], &[0; 12], &[2]].concat(),
            14,
            "key range flag 0x02 is not a Bool (0 or 1)",
        ),
        (
            [&b"C\x00"[..], &[0; 12], &[1], &[0; 9]].concat(),
            23,
            "key range max runs past the end (1 bytes left)",
        ),
    ];
    for (bytes, offset, reason) in cases {
        assert_eq!(
            delta::decode(&bytes).unwrap_err(),
            DeltaError {
                offset,
                reason: reason.into()
            },
            "{bytes:02x?}"
        );
    }
}

#[test]
fn queue_names_are_validated() {
    assert!(delta::validate_queue_name(b"").is_ok());
    assert!(delta::validate_queue_name(b"!~azAZ09:_-").is_ok());
    assert!(delta::validate_queue_name(&[b'a'; 255]).is_ok());
    assert!(delta::validate_queue_name(&[b'a'; 256]).is_err());
    for bad in [b' ', 0x7F, 0x00, 0x80, 0xFF, b'\n'] {
        assert!(
            delta::validate_queue_name(&[b'a', bad]).is_err(),
            "{bad:#x}"
        );
    }
}

// ---------- round trips ----------

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(0x21u8..=0x7E, 0..=255)
}

fn delta_strategy() -> impl Strategy<Value = Delta> {
    prop_oneof![
        (
            name(),
            any::<i32>(),
            any::<i32>(),
            any::<i32>(),
            any::<Option<(i64, i64)>>()
        )
            .prop_map(
                |(name, implementation, max_queue_size, max_message_size, key_range)| {
                    Delta::CreateQueue {
                        name,
                        implementation,
                        max_queue_size,
                        max_message_size,
                        key_range,
                    }
                }
            ),
        name().prop_map(|name| Delta::DeleteQueue { name }),
        (
            name(),
            any::<i64>(),
            prop::collection::vec(any::<u8>(), 0..300)
        )
            .prop_map(|(name, key, message)| Delta::AddRecord { name, key, message }),
        (name(), any::<u64>()).prop_map(|(name, id)| Delta::RemoveRecord { name, id }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn deltas_round_trip(d in delta_strategy()) {
        let bytes = d.encode();
        prop_assert_eq!(bytes.len(), d.as_ref().encoded_len());
        let back = delta::decode(&bytes).unwrap();
        prop_assert_eq!(&back, &d.as_ref());
        prop_assert_eq!(Delta::from(back), d);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_delta_decoder(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(d) = delta::decode(&bytes) {
            prop_assert_eq!(d.to_bytes(), bytes);
        }
    }
}

#[test]
fn decoded_delta_borrows_from_its_bytes() {
    let bytes = unhex("4100fffffffffffffffd0000000568656c6c6f");
    let d = delta::decode(&bytes).unwrap();
    let DeltaRef::AddRecord { message, .. } = d else {
        panic!("{d:?}")
    };
    assert_eq!(message.as_ptr(), bytes[14..].as_ptr());
}
