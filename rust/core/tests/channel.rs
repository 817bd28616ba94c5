//! Channels: ordered fan-out, durable cursors, roll-over, collection, watermarks.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tflux_core::channel::{Channel, ChannelOptions, Retention, SpaceProbe, Start, Watermarks};
use tflux_core::io::testing::{Fault, OpKind};
use tflux_core::Error;

/// Tiny segments, and no disk watermarks: the host's own disk usage (a CI machine at 86% or 96%)
/// must not start collections or refuse sends; the tests of the watermarks inject a probe.
fn small() -> ChannelOptions {
    ChannelOptions {
        soft_limit: 256,
        hard_limit: 512,
        preallocate: false,
        watermarks: Watermarks {
            high: None,
            low: None,
            clean: None,
        },
        ..ChannelOptions::default()
    }
}

fn recv_all(rx: &tflux_core::channel::Receiver) -> Vec<(i64, Vec<u8>)> {
    let batch = rx
        .recv_many(1 << 20, u64::MAX, Some(Duration::ZERO))
        .unwrap();
    (0..batch.len())
        .map(|i| (batch.first_lsn + i as i64, batch.get(i).to_vec()))
        .collect()
}

fn msg(i: usize) -> Vec<u8> {
    format!("message-{i:04}").into_bytes()
}

#[test]
fn send_receive_ack_resume() {
    let dir = tempfile::tempdir().unwrap();
    let ch = Channel::open(dir.path(), small()).unwrap();
    let items: Vec<Vec<u8>> = (0..100).map(msg).collect();
    assert_eq!(ch.send_many(&items).unwrap(), 0);
    let rx = ch.receiver("a", Start::Earliest).unwrap();
    let got = recv_all(&rx);
    assert_eq!(got.len(), 100);
    for (i, (lsn, data)) in got.iter().enumerate() {
        assert_eq!(*lsn, i as i64);
        assert_eq!(data, &msg(i));
    }
    rx.ack(40).unwrap();
    assert!(rx.ack(61).is_err());
    assert_eq!((rx.position(), rx.acked()), (100, 40));
    drop(rx);
    ch.close().unwrap();
    let ch = Channel::open(dir.path(), small()).unwrap();
    // start= is ignored: the cursor exists.
    let rx = ch.receiver("a", Start::Latest).unwrap();
    let got = recv_all(&rx);
    assert_eq!(got.first().unwrap().0, 40);
    assert_eq!(got.len(), 60);
    assert!(
        ch.layout().log.read_dir().unwrap().count() >= 2,
        "rolled over"
    );
}

#[test]
fn receivers_fan_out_and_lock_their_name() {
    let dir = tempfile::tempdir().unwrap();
    let ch = Channel::open(dir.path(), small()).unwrap();
    let a = ch.receiver("a", Start::Earliest).unwrap();
    let b = ch.receiver("b", Start::Earliest).unwrap();
    assert!(matches!(
        ch.receiver("a", Start::Earliest),
        Err(Error::ReceiverLocked { .. })
    ));
    let items: Vec<Vec<u8>> = (0..10).map(msg).collect();
    ch.send_many(&items).unwrap();
    assert_eq!(recv_all(&a).len(), 10);
    assert_eq!(recv_all(&b).len(), 10);
    a.ack(10).unwrap();
    let names: Vec<_> = ch.receivers().unwrap();
    assert_eq!(names, vec![("a".into(), 10), ("b".into(), 0)]);
    assert!(matches!(
        ch.drop_receiver("b"),
        Err(Error::ReceiverLocked { .. })
    ));
    b.close();
    assert!(ch.drop_receiver("b").unwrap());
    assert_eq!(ch.receivers().unwrap().len(), 1);
    let c = ch.receiver("c", Start::Latest).unwrap();
    assert_eq!(c.position(), 10);
}

#[test]
fn readonly_receiver_follows_roll_over() {
    let dir = tempfile::tempdir().unwrap();
    let ch = Channel::open(dir.path(), small()).unwrap();
    let ro = Channel::open(
        dir.path(),
        ChannelOptions {
            readonly: true,
            ..small()
        },
    )
    .unwrap();
    let rx = ro.receiver("audit", Start::Earliest).unwrap();
    let writer = std::thread::spawn({
        let ch = ch.clone();
        move || {
            for i in 0..300 {
                ch.send_many(&[msg(i)]).unwrap();
            }
        }
    });
    let mut seen = Vec::new();
    while seen.len() < 300 {
        let b = rx
            .recv_many(1000, u64::MAX, Some(Duration::from_secs(10)))
            .unwrap();
        assert!(!b.is_empty(), "timed out after {}", seen.len());
        for i in 0..b.len() {
            seen.push((b.first_lsn + i as i64, b.get(i).to_vec()));
        }
    }
    writer.join().unwrap();
    for (i, (lsn, data)) in seen.iter().enumerate() {
        assert_eq!((*lsn, data), (i as i64, &msg(i)));
    }
    assert!(ro.send_many(&[b"x"]).is_err());
}

#[test]
fn collection_never_deletes_unacknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let ch = Channel::open(dir.path(), small()).unwrap();
    // No receiver and no retention: nothing is collected.
    let items: Vec<Vec<u8>> = (0..100).map(msg).collect();
    ch.send_many(&items).unwrap();
    ch.send_many(&items).unwrap();
    assert_eq!(ch.collect().unwrap(), 0);
    let a = ch.receiver("a", Start::Earliest).unwrap();
    let b = ch.receiver("b", Start::Earliest).unwrap();
    assert_eq!(recv_all(&a).len(), 200);
    a.ack(200).unwrap();
    assert_eq!(ch.collect().unwrap(), 0, "b has acknowledged nothing");
    recv_all(&b);
    b.ack(150).unwrap();
    assert!(ch.collect().unwrap() > 0);
    let (first, end) = ch.bounds().unwrap();
    assert!(first <= 150 && end == 200);
    // b resumes where it stopped, after a reopen too.
    drop(b);
    let b = ch.receiver("b", Start::Earliest).unwrap();
    assert_eq!(recv_all(&b).first().unwrap().0, 150);
}

#[test]
fn retention_keeps_history() {
    let dir = tempfile::tempdir().unwrap();
    let opts = ChannelOptions {
        retention: Retention {
            bytes: Some(2000),
            ms: None,
        },
        ..small()
    };
    let ch = Channel::open(dir.path(), opts).unwrap();
    let a = ch.receiver("a", Start::Earliest).unwrap();
    for i in 0..400 {
        ch.send_many(&[msg(i)]).unwrap();
    }
    recv_all(&a);
    a.ack(400).unwrap();
    ch.collect().unwrap();
    let size: u64 = std::fs::read_dir(&ch.layout().log)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(size >= 2000, "{size}");
    assert!(size < 2000 + 1024, "{size}");
}

#[derive(Debug)]
struct FakeSpace(AtomicU64);

impl SpaceProbe for FakeSpace {
    fn used_ratio(&self, _: &Path) -> std::io::Result<f64> {
        Ok(self.0.load(Ordering::Relaxed) as f64 / 100.0)
    }
}

#[test]
fn disk_watermarks_refuse_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(FakeSpace(AtomicU64::new(50)));
    let opts = ChannelOptions {
        space: probe.clone(),
        watermarks: Watermarks {
            high: Some(0.9),
            low: Some(0.8),
            clean: Some(0.7),
        },
        ..small()
    };
    let ch = Channel::open(dir.path(), opts).unwrap();
    ch.send_many(&[b"a"]).unwrap();
    probe.0.store(95, Ordering::Relaxed);
    assert!(matches!(ch.send_many(&[b"b"]), Err(Error::DiskFull { .. })));
    probe.0.store(85, Ordering::Relaxed);
    assert!(matches!(ch.send_many(&[b"b"]), Err(Error::DiskFull { .. })));
    probe.0.store(79, Ordering::Relaxed);
    assert_eq!(ch.send_many(&[b"b"]).unwrap(), 1);
    assert_eq!(ch.bounds().unwrap(), (0, 2));
}

#[test]
fn empty_messages_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ch = Channel::open(dir.path(), small()).unwrap();
    assert!(matches!(
        ch.send_many(&[b"a".as_slice(), b""]),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(ch.bounds().unwrap(), (0, 0));
}

#[test]
fn close_wakes_a_waiting_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let ch = Channel::open(dir.path(), small()).unwrap();
    let rx = ch.receiver("a", Start::Earliest).unwrap();
    let t = std::thread::spawn(move || rx.recv_many(1, u64::MAX, None));
    std::thread::sleep(Duration::from_millis(50));
    ch.close().unwrap();
    assert!(matches!(t.join().unwrap(), Err(Error::Closed(_))));
}

#[test]
fn store_refuses_writes_above_disk_full_ratio() {
    use tflux_core::store::{Store, StoreOptions};
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(FakeSpace(AtomicU64::new(50)));
    let opts = StoreOptions {
        space: probe.clone(),
        ..StoreOptions::default()
    };
    let store = Store::open_with(dir.path(), Some(r#"{"DiskFullRatio": 0.9}"#), opts).unwrap();
    store.enqueue(b"", 1, b"a").unwrap();
    probe.0.store(90, Ordering::Relaxed);
    assert!(matches!(
        store.enqueue(b"", 1, b"b"),
        Err(Error::DiskFull { .. })
    ));
    probe.0.store(89, Ordering::Relaxed);
    store.enqueue(b"", 1, b"b").unwrap();
    assert_eq!(store.queues().unwrap()[0].count, 2);
}

#[test]
fn receivers_read_compressed_sealed_segments() {
    use tflux_core::format::compressed;
    let dir = tempfile::tempdir().unwrap();
    let ch = Channel::open(dir.path(), small()).unwrap();
    for i in 0..100 {
        ch.send_many(&[msg(i)]).unwrap();
    }
    // Replace every sealed segment by its .log.z (spec section 9), as compression does.
    let (segs, _) = tflux_core::io::fsutil::list_segments(
        &tflux_core::io::storage::RealStorage,
        &ch.layout().log,
    )
    .unwrap();
    let mut compressed_any = false;
    for pair in segs.windows(2) {
        let original = std::fs::read(&pair[0].path).unwrap();
        let z = compressed::encode(
            compressed::Method::Zstd,
            pair[0].first_lsn,
            pair[1].first_lsn - 1,
            &original,
        );
        std::fs::write(
            ch.layout()
                .log
                .join(compressed::file_name(pair[0].first_lsn)),
            z,
        )
        .unwrap();
        std::fs::remove_file(&pair[0].path).unwrap();
        compressed_any = true;
    }
    assert!(compressed_any);
    let ro = Channel::open(
        dir.path(),
        ChannelOptions {
            readonly: true,
            ..small()
        },
    )
    .unwrap();
    let rx = ro.receiver("z", Start::Earliest).unwrap();
    let got = recv_all(&rx);
    assert_eq!(got.len(), 100);
    for (i, (lsn, data)) in got.iter().enumerate() {
        assert_eq!((*lsn, data), (i as i64, &msg(i)));
    }
}

#[test]
fn compress_sealed_compresses_at_roll_over_and_receivers_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let opts = ChannelOptions {
        compress_sealed: Some("zstd".into()),
        ..small()
    };
    let ch = Channel::open(dir.path(), opts).unwrap();
    for i in 0..100 {
        ch.send_many(&[msg(i)]).unwrap();
    }
    let zipped = std::fs::read_dir(&ch.layout().log)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".log.z")
        })
        .count();
    assert!(zipped > 0);
    let rx = ch.receiver("a", Start::Earliest).unwrap();
    let got = recv_all(&rx);
    assert_eq!(got.len(), 100);
    assert_eq!(got[99], (99, msg(99)));
    assert!(Channel::open(
        tempfile::tempdir().unwrap().path(),
        ChannelOptions {
            compress_sealed: Some("gzip".into()),
            ..small()
        }
    )
    .is_err());
}

/// A channel on a [`FaultStorage`] whose next operation of `kind` fails.
fn faulty(dir: &Path) -> (Channel, Arc<tflux_core::io::testing::FaultStorage>) {
    let storage = tflux_core::io::testing::FaultStorage::new(dir).unwrap();
    let opts = ChannelOptions {
        storage: storage.clone(),
        ..small()
    };
    (Channel::open(dir, opts).unwrap(), storage)
}

fn fail_next(storage: &tflux_core::io::testing::FaultStorage, kind: OpKind) {
    storage.fail(Fault {
        kind: Some(kind),
        nth: storage.ops_of(kind),
        errno: tflux_core::io::testing::EIO,
    });
}

#[test]
fn a_failed_write_fails_the_whole_send_and_stops_sends_but_not_receivers() {
    let dir = tempfile::tempdir().unwrap();
    let (ch, storage) = faulty(dir.path());
    let first: Vec<Vec<u8>> = (0..5).map(msg).collect();
    ch.send_many(&first).unwrap();
    let rx = ch.receiver("a", Start::Earliest).unwrap();
    // The batch's write fails half way (FaultStorage leaves the first half behind).
    fail_next(&storage, OpKind::Write);
    let batch: Vec<Vec<u8>> = (5..25).map(msg).collect();
    assert!(matches!(ch.send_many(&batch), Err(Error::Io { .. })));
    assert!(ch.stopped().is_some());
    // Fail-stop: later sends are refused, though the storage works again.
    assert!(matches!(
        ch.send_many(&[msg(99)]),
        Err(Error::Poisoned { .. })
    ));
    // Still readable: receivers (old and new) get exactly what was sent before, none of the
    // failed batch.
    let want: Vec<(i64, Vec<u8>)> = first
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, d)| (i as i64, d))
        .collect();
    assert_eq!(recv_all(&rx), want);
    rx.ack(5).unwrap();
    let b = ch.receiver("b", Start::Earliest).unwrap();
    assert_eq!(recv_all(&b), want);
    assert_eq!(ch.bounds().unwrap(), (0, 5));
    drop((rx, b));
    ch.close().unwrap();
    // Reopened: none of the failed batch, and sending works again at LSN 5.
    let ch = Channel::open(dir.path(), small()).unwrap();
    assert_eq!(ch.bounds().unwrap(), (0, 5));
    assert_eq!(ch.send_many(&[msg(5)]).unwrap(), 5);
    let rx = ch.receiver("a", Start::Earliest).unwrap();
    assert_eq!(recv_all(&rx), vec![(5, msg(5))]);
}

#[test]
fn a_failed_fsync_fails_the_send_and_stops_sends_but_not_receivers() {
    let dir = tempfile::tempdir().unwrap();
    let (ch, storage) = faulty(dir.path());
    ch.send_many(&[msg(0)]).unwrap();
    fail_next(&storage, OpKind::Sync);
    assert!(matches!(
        ch.send_many(&[msg(1)]),
        Err(Error::NotDurable { .. })
    ));
    assert!(matches!(
        ch.send_many(&[msg(2)]),
        Err(Error::Poisoned { .. })
    ));
    let rx = ch.receiver("a", Start::Earliest).unwrap();
    assert_eq!(recv_all(&rx).first(), Some(&(0, msg(0))));
    rx.ack(1).unwrap();
    drop(rx);
    ch.close().unwrap();
    let ch = Channel::open(dir.path(), small()).unwrap();
    let next = ch.bounds().unwrap().1;
    assert_eq!(ch.send_many(&[msg(3)]).unwrap(), next);
}

#[test]
fn above_the_cleaning_ratio_collection_ignores_retention_but_not_receivers() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(FakeSpace(AtomicU64::new(50)));
    let opts = ChannelOptions {
        space: probe.clone(),
        retention: Retention {
            bytes: Some(1 << 30),
            ms: None,
        },
        watermarks: Watermarks {
            high: Some(0.95),
            low: Some(0.90),
            clean: Some(0.85),
        },
        ..small()
    };
    let ch = Channel::open(dir.path(), opts).unwrap();
    let fast = ch.receiver("fast", Start::Earliest).unwrap();
    let slow = ch.receiver("slow", Start::Earliest).unwrap();
    for i in 0..200 {
        ch.send_many(&[msg(i)]).unwrap();
    }
    recv_all(&fast);
    fast.ack(200).unwrap();
    recv_all(&slow);
    slow.ack(100).unwrap();
    // Below the cleaning ratio retention keeps everything, after roll-over and on demand.
    ch.send_many(&[msg(200)]).unwrap();
    assert_eq!(ch.collect().unwrap(), 0);
    assert_eq!(ch.bounds().unwrap().0, 0);
    // Above it the next send collects by itself, up to what `slow` has acknowledged.
    probe.0.store(86, Ordering::Relaxed);
    ch.send_many(&[msg(201)]).unwrap();
    let first = ch.bounds().unwrap().0;
    assert!(first > 0 && first <= 100, "{first}");
    slow.close();
    let slow = ch.receiver("slow", Start::Earliest).unwrap();
    let got = recv_all(&slow);
    assert_eq!((got[0].0, got.len()), (100, 102));
}

#[test]
fn a_send_cut_short_leaves_nothing_readable_even_if_the_device_then_dies() {
    // The batch's write stops half way (ENOSPC) and every later write fails (the device is
    // gone): no clean-up can run. Receivers, and the log reopened on the files as they are,
    // must see none of the failed send.
    let dir = tempfile::tempdir().unwrap();
    let (ch, storage) = faulty(dir.path());
    ch.send_many(&[msg(0)]).unwrap();
    let rx = ch.receiver("a", Start::Earliest).unwrap();
    assert_eq!(recv_all(&rx), vec![(0, msg(0))]);
    fail_next(&storage, OpKind::Write);
    storage.crash_at(storage.ops() + 1);
    let batch: Vec<Vec<u8>> = (1..40).map(msg).collect();
    assert!(ch.send_many(&batch).is_err());
    assert_eq!(recv_all(&rx), vec![]);
    drop(rx);
    let _ = ch.close();
    drop(ch);
    let ch = Channel::open(dir.path(), small()).unwrap();
    assert_eq!(ch.bounds().unwrap(), (0, 1));
    let rx = ch.receiver("b", Start::Earliest).unwrap();
    assert_eq!(recv_all(&rx), vec![(0, msg(0))]);
}

/// Used space = the bytes of the channel's log files over a fixed capacity (what collection
/// frees shows at once).
#[derive(Debug)]
struct LogSpace {
    capacity: u64,
}

impl SpaceProbe for LogSpace {
    fn used_ratio(&self, log: &Path) -> std::io::Result<f64> {
        let mut used = 0;
        for e in std::fs::read_dir(log)? {
            used += e?.metadata()?.len();
        }
        Ok(used as f64 / self.capacity as f64)
    }
}

#[test]
fn refused_sends_resume_by_themselves_once_receivers_acknowledge() {
    // The channel's own segments fill the disk: above the high ratio sends are refused; once
    // the receiver has acknowledged them, the next send collects (the disk is above the
    // cleaning ratio too) and goes through, with no explicit collect().
    let dir = tempfile::tempdir().unwrap();
    let opts = ChannelOptions {
        space: Arc::new(LogSpace { capacity: 8192 }),
        watermarks: Watermarks {
            high: Some(0.9),
            low: Some(0.8),
            clean: Some(0.7),
        },
        ..small()
    };
    let ch = Channel::open(dir.path(), opts).unwrap();
    let rx = ch.receiver("a", Start::Earliest).unwrap();
    let mut sent = 0;
    let refused = loop {
        match ch.send_many(&[msg(sent)]) {
            Ok(_) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 10_000, "never refused");
    };
    assert!(matches!(refused, Error::DiskFull { .. }), "{refused:?}");
    assert!(ch.disk_full());
    // Nothing acknowledged: still refused, and nothing was deleted.
    assert!(matches!(
        ch.send_many(&[msg(sent)]),
        Err(Error::DiskFull { .. })
    ));
    assert_eq!(ch.bounds().unwrap().0, 0);
    assert_eq!(recv_all(&rx).len(), sent);
    rx.ack(sent as u64).unwrap();
    assert_eq!(ch.send_many(&[msg(sent)]).unwrap(), sent as i64);
    assert!(!ch.disk_full());
    assert!(ch.bounds().unwrap().0 > 0);
}

#[test]
fn closing_the_channel_releases_its_receivers_names() {
    let dir = tempfile::tempdir().unwrap();
    let ch = Channel::open(dir.path(), small()).unwrap();
    ch.send_many(&[msg(0)]).unwrap();
    let rx = ch.receiver("a", Start::Earliest).unwrap();
    ch.close().unwrap();
    assert!(rx.closed());
    assert!(matches!(rx.ack(0), Err(Error::Closed(_))));
    // The closed channel's receiver is still alive, but its name is free.
    let ch = Channel::open(dir.path(), small()).unwrap();
    let again = ch.receiver("a", Start::Latest).unwrap();
    assert_eq!(recv_all(&again), vec![(0, msg(0))]);
    drop(rx);
    assert!(matches!(
        ch.receiver("a", Start::Earliest),
        Err(Error::ReceiverLocked { .. })
    ));
}

/// Issue 30, item 8: a receiver whose creation is refused after its cursor was written (here
/// the cursor's final directory fsync fails; in the field, a collection raced it) left the
/// cursor behind: the name was unusable and the orphan cursor held back collection for good.
#[test]
fn a_refused_receiver_creation_leaves_no_cursor_behind() {
    let dir = tempfile::tempdir().unwrap();
    let (ch, storage) = faulty(dir.path());
    ch.send_many(&[msg(0), msg(1)]).unwrap();
    drop(ch.receiver("warm", Start::Earliest).unwrap()); // locks/ and cursors/temp/ exist
                                                         // Receiver "x": its lock file's directory fsync, then the cursor's final one (after the
                                                         // rename put the file in place) fails.
    storage.fail(Fault {
        kind: Some(OpKind::SyncDir),
        nth: storage.ops_of(OpKind::SyncDir) + 1,
        errno: tflux_core::io::testing::EIO,
    });
    assert!(ch.receiver("x", Start::Lsn(1)).is_err());
    let cursor = dir.path().join("data/cursors/x.cursor");
    assert!(!cursor.exists(), "the refused creation left its cursor");
    let names: Vec<String> = ch.receivers().unwrap().into_iter().map(|r| r.0).collect();
    assert_eq!(names, vec!["warm".to_string()]);
    let rx = ch.receiver("x", Start::Lsn(1)).unwrap();
    assert_eq!(recv_all(&rx), vec![(1, msg(1))]);
}

/// Issue 30, item 5: a roll-over whose new segment could not be preallocated (disk full) left
/// the log refusing every send, again after each reopen, and `collect()` refused too, so the
/// acknowledged segments that would have freed the space were never deleted. Now the send that
/// filled the segment and every later one succeed, collection runs, and the roll-over happens
/// once a segment can be made again.
#[test]
fn a_roll_over_that_cannot_make_its_segment_stops_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (ch, storage) = faulty(dir.path());
    let rx = ch.receiver("r", Start::Earliest).unwrap();
    // The next segment's creation fails with ENOSPC, twice (the roll-over is tried again).
    for k in 0..2 {
        storage.fail(Fault {
            kind: Some(OpKind::Create),
            nth: storage.ops_of(OpKind::Create) + k,
            errno: tflux_core::io::testing::ENOSPC,
        });
    }
    let before = ch.bounds().unwrap();
    for i in 0..20 {
        ch.send_many(&[msg(i)]).unwrap(); // 20 x ~30 B: past the 256 B soft limit
    }
    assert!(ch.stopped().is_none(), "{:?}", ch.stopped());
    assert_eq!(ch.collect().unwrap(), 0); // runs (nothing acknowledged yet)
    assert_eq!(recv_all(&rx).len(), 20);
    rx.ack(20).unwrap();
    for i in 20..60 {
        ch.send_many(&[msg(i)]).unwrap();
    }
    assert_eq!(recv_all(&rx).len(), 40);
    rx.ack(40).unwrap();
    // The roll-over happened once the faults were spent, and collection freed what was read.
    assert!(ch.collect().unwrap() > 0);
    assert!(ch.bounds().unwrap().0 > before.0);
}

/// Segments of a hand-written log: each a list of `(term, data)`.
type Segments<'a> = &'a [&'a [(i32, &'a [u8])]];

/// Writes `segments` (each a list of (term, data), the first starting at LSN 0) into the
/// channel log at `dir`, framed by hand from the spec ([`common::hand_segment`]), as another
/// writer of the format could: records a channel never sends itself (an empty one, a term that
/// goes down).
fn foreign_log(dir: &Path, segments: Segments<'_>) {
    let log_dir = dir.join("data").join("log");
    std::fs::create_dir_all(&log_dir).unwrap();
    let mut lsn = 0i64;
    for entries in segments {
        std::fs::write(
            log_dir.join(common::seg_name(lsn)),
            common::hand_segment(entries),
        )
        .unwrap();
        lsn += entries.len() as i64;
    }
}

fn readonly_receiver(dir: &Path) -> (Channel, tflux_core::channel::Receiver) {
    let ro = Channel::open(
        dir,
        ChannelOptions {
            readonly: true,
            ..small()
        },
    )
    .unwrap();
    let rx = ro.receiver("r", Start::Earliest).unwrap();
    (ro, rx)
}

#[test]
fn a_receiver_reads_an_empty_record_between_others_as_the_scanner_does() {
    // The scanner (recovery, verify) takes an empty record followed by more records as a
    // record; the follower must agree, in the active segment and in a sealed one, and not
    // wait forever (or spin) in front of it.
    let items: [(i32, &[u8]); 4] = [(0, b"a"), (0, b""), (0, b"b"), (0, b"c")];
    let layouts: [Segments<'_>; 2] = [&[&items], &[&items[..3], &items[3..]]];
    for (roll_after, segments) in layouts.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        foreign_log(dir.path(), segments);
        let (_ro, rx) = readonly_receiver(dir.path());
        let got = recv_all(&rx);
        let want: Vec<(i64, Vec<u8>)> = items
            .iter()
            .enumerate()
            .map(|(i, (_, d))| (i as i64, d.to_vec()))
            .collect();
        assert_eq!(got, want, "layout {roll_after}");
    }
}

#[test]
fn a_receiver_refuses_a_term_that_goes_down_in_a_sealed_segment_as_the_scanner_does() {
    let dir = tempfile::tempdir().unwrap();
    foreign_log(dir.path(), &[&[(2, b"a"), (1, b"b")], &[(3, b"c")]]);
    let (_ro, rx) = readonly_receiver(dir.path());
    let err = rx
        .recv_many(1 << 20, u64::MAX, Some(Duration::ZERO))
        .map(|b| b.len());
    match err {
        Err(Error::Corruption { reason, .. }) => assert!(reason.contains("term"), "{reason}"),
        other => panic!("expected corruption naming the term, got {other:?}"),
    }
}
