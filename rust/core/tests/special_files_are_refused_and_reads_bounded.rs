//! Files that are not what their names say: special files (a FIFO, a directory, a device, a
//! dangling symlink) given as the metadata, the snapshot or the settings are refused without
//! blocking; reads are bounded by the format, not by a file's size; settings errors quote a
//! short prefix.

mod common;

use std::path::Path;

use common::*;
use tflux_core::base::files;
use tflux_core::format::snapshot;
use tflux_core::Error;

// ---------- special files (issue 10, defect 7) ----------

fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

/// Runs `f` on another thread and fails (instead of hanging) if it takes over 10 s.
fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("the read blocked or ran away")
}

fn refused_naming(r: tflux_core::Result<impl std::fmt::Debug>, path: &Path, needle: &str) {
    match r {
        Err(e @ Error::Corruption { .. }) | Err(e @ Error::Settings(_)) => {
            let m = e.to_string();
            assert!(m.contains(&path.display().to_string()), "{m}");
            assert!(m.contains(needle), "{m}");
        }
        other => panic!(
            "expected a refusal naming {}, got {other:?}",
            path.display()
        ),
    }
}

#[test]
fn special_files_as_metadata_snapshot_or_settings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    let meta = base.join("tflux.metadata");
    let snap = base.join("tflux.snapshot");
    let settings = base.join(tflux_core::base::settings::SETTINGS_FILE);

    // A FIFO: refused at once, never a blocked open.
    for p in [&meta, &snap, &settings] {
        mkfifo(p);
    }
    let (m, s, t) = (meta.clone(), snap.clone(), base.clone());
    let (rm, rs, rt) = within_10s(move || {
        (
            files::read_metadata(&m),
            files::read_snapshot(&s),
            tflux_core::base::settings::Settings::load(&t, None),
        )
    });
    refused_naming(rm, &meta, "a FIFO, not a regular file");
    refused_naming(rs, &snap, "a FIFO, not a regular file");
    refused_naming(rt, &settings, "a FIFO, not a regular file");

    // A symlink to /dev/zero: refused, never read until memory runs out.
    for p in [&meta, &snap, &settings] {
        std::fs::remove_file(p).unwrap();
        std::os::unix::fs::symlink("/dev/zero", p).unwrap();
    }
    let (m, s, t) = (meta.clone(), snap.clone(), base.clone());
    let (rm, rs, rt) = within_10s(move || {
        (
            files::read_metadata(&m),
            files::read_snapshot(&s),
            tflux_core::base::settings::Settings::load(&t, None),
        )
    });
    refused_naming(rm, &meta, "a character device, not a regular file");
    refused_naming(rs, &snap, "a character device, not a regular file");
    refused_naming(rt, &settings, "a character device, not a regular file");

    // A directory with the settings file's name is not "no settings file".
    std::fs::remove_file(&settings).unwrap();
    std::fs::create_dir(&settings).unwrap();
    refused_naming(
        tflux_core::base::settings::Settings::load(&base, None),
        &settings,
        "a directory, not a regular file",
    );

    // A symlink to a regular file is read as that file.
    std::fs::remove_file(&snap).unwrap();
    let real = base.join("real.snapshot");
    std::fs::write(&real, golden("tflux.snapshot")).unwrap();
    std::os::unix::fs::symlink(&real, &snap).unwrap();
    let through_link = files::read_snapshot(&snap).unwrap();
    assert!(through_link.is_some());
    assert_eq!(through_link, files::read_snapshot(&real).unwrap());
}

#[test]
fn reads_are_bounded_by_the_format() {
    let dir = tempfile::tempdir().unwrap();
    // A sparse file longer than any snapshot the format allows: refused without reading it.
    let snap = dir.path().join("tflux.snapshot");
    let f = std::fs::File::create(&snap).unwrap();
    f.set_len(snapshot::MAX_FILE_LEN + 1).unwrap();
    refused_naming(files::read_snapshot(&snap), &snap, "bytes long");
    // Settings: at most 1 MiB.
    let settings = dir.path().join(tflux_core::base::settings::SETTINGS_FILE);
    let mut text = b"{\"LogSyncPolicy\": \"".to_vec();
    text.resize(
        tflux_core::base::settings::SETTINGS_MAX_LEN as usize + 1,
        b'x',
    );
    std::fs::write(&settings, &text).unwrap();
    refused_naming(
        tflux_core::base::settings::Settings::load(dir.path(), None),
        &settings,
        "1048577 bytes long",
    );
}

/// Issue 10, defect 13: a bad key or value is quoted by a short prefix, never whole.
#[test]
fn settings_errors_quote_a_short_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join(tflux_core::base::settings::SETTINGS_FILE);
    let long = "y".repeat(500_000);
    for text in [
        format!("{{\"LogSyncPolicy\": \"{long}\"}}"),
        format!("{{\"{long}\": 1}}"),
        format!("{{\"LogFileSoftLimit\": [{}1]}}", "1,".repeat(200_000)),
    ] {
        std::fs::write(&settings, &text).unwrap();
        let e = tflux_core::base::settings::Settings::load(dir.path(), None).unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, Error::Settings(_)), "{m}");
        assert!(m.len() < 600, "{} bytes: {}", m.len(), &m[..600]);
    }
    std::fs::remove_file(&settings).unwrap();
    let e = tflux_core::base::settings::Settings::load(
        dir.path(),
        Some(&format!("{{\"LogSyncPolicy\": \"{long}\"}}")),
    )
    .unwrap_err();
    assert!(e.to_string().len() < 600);
    assert!(e.to_string().contains("LogSyncPolicy"), "{e}");
}
