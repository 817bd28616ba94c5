//! The metadata codec (spec section 6): the golden file decodes and encodes byte-identically,
//! corrupt bytes are `CorruptionError`s naming their offsets, random values round-trip, and
//! metadata files are written atomically.

mod common;

use std::path::Path;

use common::*;
use proptest::prelude::*;
use tflux_core::base::files;
use tflux_core::format::metadata::{self, Metadata};
use tflux_core::io::storage::RealStorage;
use tflux_core::Error;

fn hand_metadata(version: i32, term: i32, vote: i32) -> Vec<u8> {
    let mut f = vec![0x5A, 0x6E, 0xA0, 0x12];
    f.extend_from_slice(&version.to_be_bytes());
    f.extend_from_slice(&term.to_be_bytes());
    f.extend_from_slice(&vote.to_be_bytes());
    let crc = crc32fast::hash(&f[4..]);
    f.extend_from_slice(&crc.to_be_bytes());
    f
}

fn meta_err(bytes: &[u8]) -> (u64, String) {
    corruption_offset(metadata::decode(bytes, Path::new("tflux.metadata")))
}

// ---------- metadata ----------

#[test]
fn golden_metadata_decodes_and_encodes_byte_identically() {
    let cases = [
        (
            "tflux.metadata",
            Metadata {
                term: 7,
                voted_for: Some(2),
            },
        ),
        (
            "tflux.metadata.novote",
            Metadata {
                term: 1,
                voted_for: None,
            },
        ),
    ];
    for (name, expected) in cases {
        let bytes = golden(name);
        assert_eq!(
            metadata::decode(&bytes, Path::new(name)).unwrap(),
            expected,
            "{name}"
        );
        assert_eq!(metadata::encode(&expected).to_vec(), bytes, "{name}");
        assert_eq!(
            hand_metadata(1, expected.term, expected.voted_for.unwrap_or(-1)),
            bytes
        );
    }
    // Some(-1) is "no vote" too.
    let m = Metadata {
        term: 1,
        voted_for: Some(-1),
    };
    assert_eq!(
        metadata::encode(&m).to_vec(),
        golden("tflux.metadata.novote")
    );
}

#[test]
fn metadata_errors_name_their_offsets() {
    let good = golden("tflux.metadata");
    for cut in 0..20 {
        let (offset, reason) = meta_err(&good[..cut]);
        assert_eq!(offset, cut as u64);
        assert!(reason.contains("expected exactly 20"), "{reason}");
    }
    let mut long = good.clone();
    long.push(0);
    assert_eq!(meta_err(&long).0, 20);
    for i in 0..20 {
        let mut b = good.clone();
        b[i] ^= 0x40;
        let expected = match i {
            0..=3 => 0,
            4..=7 => 4,
            _ => 16,
        };
        assert_eq!(meta_err(&b).0, expected, "byte {i}");
    }
    assert_eq!(
        meta_err(&hand_metadata(2, 1, -1)),
        (4, "unknown metadata version 2 (expected 1)".into())
    );
    assert_eq!(
        meta_err(&hand_metadata(1, -1, -1)),
        (8, "negative term -1".into())
    );
    assert_eq!(
        meta_err(&hand_metadata(1, 1, -2)),
        (12, "invalid vote -2 (expected -1 or a node id >= 0)".into())
    );
    assert!(metadata::decode(&hand_metadata(1, 0, 0), Path::new("m")).is_ok());
}

#[test]
fn metadata_files_are_written_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tflux.metadata");
    assert_eq!(files::read_metadata(&path).unwrap(), Metadata::default());
    std::fs::write(&path, b"").unwrap();
    assert_eq!(
        files::read_metadata(&path).unwrap(),
        Metadata {
            term: 1,
            voted_for: None
        }
    );
    let m = Metadata {
        term: 7,
        voted_for: Some(2),
    };
    files::write_metadata(&RealStorage, &path, &m).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), golden("tflux.metadata"));
    files::write_metadata(
        &RealStorage,
        &path,
        &Metadata {
            term: 8,
            voted_for: None,
        },
    )
    .unwrap();
    assert_eq!(
        files::read_metadata(&path).unwrap(),
        Metadata {
            term: 8,
            voted_for: None
        }
    );
    assert_eq!(
        std::fs::read_dir(dir.path().join("temp")).unwrap().count(),
        0
    );
    for bad in [
        Metadata {
            term: -1,
            voted_for: None,
        },
        Metadata {
            term: 1,
            voted_for: Some(-2),
        },
    ] {
        assert!(matches!(
            files::write_metadata(&RealStorage, &path, &bad),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert_eq!(files::read_metadata(&path).unwrap().term, 8);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn metadata_round_trips(term in 0..=i32::MAX, vote in prop::option::of(0..=i32::MAX)) {
        let m = Metadata { term, voted_for: vote };
        prop_assert_eq!(metadata::decode(&metadata::encode(&m), Path::new("m")).unwrap(), m);
    }
}
