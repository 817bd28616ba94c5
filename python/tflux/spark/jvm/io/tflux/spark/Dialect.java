package io.tflux.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.zip.CRC32;

/**
 * The two dialects of a base directory (spec section 11) and how a reader finds which one it
 * holds: the JVM twin of the core's {@code format/dialect.rs} (what one file's bytes say) and
 * {@code log/dialect.rs} (deciding for a directory, from the first record of every segment). A
 * file says a dialect only when its bytes fit that dialect and not the other, checksum included;
 * files that disagree are an error naming them; files that say nothing leave the choice (else
 * spec). The shared vectors and the real
 * TaskFlux directories hold it equal to the core.
 */
enum Dialect {
  /** The format document's framing: Int32 term, CRC-32 (zlib), padding to 4 bytes. */
  SPEC("spec", 16, 8, 12, true),
  /** TaskFlux's: Int64 term (1..2^31-1 in tflux), CRC-32/MPEG-2, no padding. */
  TASKFLUX("taskflux", 20, 12, 16, false);

  final String label;
  /** Bytes of a record header (marker, term, checksum, length). */
  final int header;
  final int crcAt;
  final int lenAt;
  final boolean padded;

  Dialect(String label, int header, int crcAt, int lenAt, boolean padded) {
    this.label = label;
    this.header = header;
    this.crcAt = crcAt;
    this.lenAt = lenAt;
    this.padded = padded;
  }

  /** Bytes a record of {@code n} data bytes occupies. */
  long recordLen(int n) {
    return (long) header + n + (padded ? (4 - n % 4) % 4 : 0);
  }

  /** The checksum of {@code b[from, to)} in this dialect. */
  int checksum(ByteBuffer b, int from, int to) {
    if (this == TASKFLUX) {
      return Crc32Mpeg2.of(b, from, to);
    }
    CRC32 crc = new CRC32();
    ByteBuffer d = b.duplicate();
    d.limit(to).position(from);
    crc.update(d);
    return (int) crc.getValue();
  }

  /** The dialect a user names (the {@code dialect} option); null for null or empty. */
  static Dialect parse(String name) {
    if (name == null || name.trim().isEmpty()) {
      return null;
    }
    for (Dialect d : values()) {
      if (d.label.equals(name.trim().toLowerCase(java.util.Locale.ROOT))) {
        return d;
      }
    }
    throw new IllegalArgumentException("tflux: option dialect=" + name
        + " is not spec or taskflux");
  }

  /** What one file said, for an error message. */
  static final class Said {
    final Dialect dialect;
    final String path;
    final String why;

    Said(Dialect dialect, String path, String why) {
      this.dialect = dialect;
      this.path = path;
      this.why = why;
    }
  }

  /** What the record at {@code b[at..len)} says: the framing it parses under alone, or null. */
  static Dialect recordSays(ByteBuffer b, int at, int len) {
    boolean spec = parses(SPEC, b, at, len);
    boolean taskflux = parses(TASKFLUX, b, at, len);
    return spec == taskflux ? null : spec ? SPEC : TASKFLUX;
  }

  private static boolean parses(Dialect d, ByteBuffer b, int at, int len) {
    if (len - at < d.header || b.getInt(at) != SegmentReader.RECORD_MARKER) {
      return false;
    }
    long term = d == TASKFLUX ? b.getLong(at + 4) : b.getInt(at + 4);
    int n = b.getInt(at + d.lenAt);
    if (n < 0 || (d == TASKFLUX ? term < 1 : term < 0) || d.recordLen(n) > len - at) {
      return false;
    }
    int dataAt = at + d.header;
    for (long p = dataAt + (long) n; p < at + d.recordLen(n); p++) {
      if (b.get((int) p) != 0) {
        return false;
      }
    }
    return d.checksum(b, dataAt, dataAt + n) == b.getInt(at + d.crcAt);
  }

  /** What a metadata file says: its length (20 or 24) with that layout's checksum. */
  static Dialect metadataSays(ByteBuffer b, int len) {
    Dialect d = len == 20 ? SPEC : len == 24 ? TASKFLUX : null;
    if (d == null || b.getInt(0) != 0x5A6EA012) {
      return null;
    }
    return d.checksum(b, 4, len - 4) == b.getInt(len - 4) ? d : null;
  }

  /**
   * What a snapshot says: the wide marker is spec, and so is the task layout (its lengths and
   * checksum: {@link #taskLayoutFits}); under the shared marker, the header whose
   * state length accounts for the file's length exactly, and whose checksum matches.
   */
  static Dialect snapshotSays(ByteBuffer b, int len) {
    if (len < 4) {
      return null;
    }
    int marker = b.getInt(0);
    if (marker == Snapshot.WIDE_MARKER) {
      return SPEC;
    }
    if (marker == Snapshot.TASK_MARKER) {
      return taskLayoutFits(b, len) ? SPEC : null;
    }
    if (marker != Snapshot.MARKER) {
      return null;
    }
    boolean spec = snapshotFits(SPEC, b, len, 12);
    boolean taskflux = snapshotFits(TASKFLUX, b, len, 20);
    return spec == taskflux ? null : spec ? SPEC : TASKFLUX;
  }

  /**
   * The core's {@code task_layout_fits}: the task layout's lengths (spec 12: the wide header,
   * a state Buffer, a tasks Buffer, a checksum ending the file) and its checksum (of index,
   * term, state bytes and tasks bytes). Its marker is one bit from the shared one, and a
   * damaged TaskFlux snapshot must say nothing: its state length leaves no room for the tasks.
   */
  private static boolean taskLayoutFits(ByteBuffer b, int len) {
    if (len < 24) {
      return false;
    }
    int n = b.getInt(20);
    long tasksLenAt = 24L + n;
    if (n < Snapshot.MIN_QUEUE_LEN + 4 || tasksLenAt + 8 > len) {
      return false;
    }
    int m = b.getInt((int) tasksLenAt);
    if (m < 0 || tasksLenAt + 4 + m + 4 != len) {
      return false;
    }
    CRC32 crc = new CRC32();
    ByteBuffer d = b.duplicate();
    crc.update(d.limit(20).position(4));
    crc.update(b.duplicate().limit((int) tasksLenAt).position(24));
    crc.update(b.duplicate().limit(len - 4).position((int) tasksLenAt + 4));
    return (int) crc.getValue() == b.getInt(len - 4);
  }

  private static boolean snapshotFits(Dialect d, ByteBuffer b, int len, int lenAt) {
    if (len < lenAt + 4) {
      return false;
    }
    int n = b.getInt(lenAt);
    int stateAt = lenAt + 4;
    if (n < Snapshot.MIN_QUEUE_LEN + 4 || (long) stateAt + n + 4 != len) {
      return false;
    }
    return d.checksum(b, stateAt, stateAt + n) == b.getInt(stateAt + n);
  }

  /**
   * The dialect of a source: what its metadata file, snapshot and every segment say, agreeing
   * with {@code chosen}; files that disagree fail naming both. Nothing said: {@code chosen},
   * else spec, except where a segment's first record is written but reads in neither framing
   * and records follow it (the core's {@code decide_or_refuse}): then the files cannot decide,
   * and a read in either dialect would cut that record and every one after it.
   */
  static Dialect of(Sources.Source src, Dialect chosen) throws IOException {
    List<Said> said = new ArrayList<>();
    if (src.snapshot != null) {
      Path snap = Paths.get(src.snapshot);
      add(said, snap, 1 << 20, (b, len) -> snapshotSays(b, len), "its snapshot's header");
      Path meta = snap.resolveSibling("tflux.metadata");
      add(said, meta, 24, (b, len) -> metadataSays(b, len), "its metadata file's length");
    } else if (src.base != null) {
      Path data = Paths.get(src.base, "data");
      add(said, data.resolve("tflux.metadata"), 24, (b, len) -> metadataSays(b, len),
          "its metadata file's length");
    }
    String undecided = null;
    if (src.logDir != null) {
      // The first record of every segment (the core's log_says, issue 43): a segment of the
      // other dialect anywhere in the log is found, never read as a torn tail.
      for (String name : Sources.segmentNames(src.logDir)) {
        if (!name.endsWith(".log")) {
          continue; // a compressed segment exists only in the spec dialect (its own header)
        }
        Path segment = Paths.get(src.logDir, name);
        Probe p = probe(segment);
        if (p.found != null) {
          said.add(new Said(p.found, segment.toString(), p.why));
        } else if (p.undecided && undecided == null) {
          undecided = segment.toString();
        }
      }
    }
    if (undecided != null && said.isEmpty() && chosen == null) {
      throw new CorruptException(undecided, -1, "the files cannot decide this directory's "
          + "dialect: the first record of this segment reads in neither dialect's framing "
          + "(damaged), records follow it, and no metadata file, snapshot or other segment "
          + "says one. Nothing was read. Choose the dialect (option dialect=\"spec\" or "
          + "dialect=\"taskflux\"; tflux's --dialect): a read in either cuts this record and "
          + "every one after it");
    }
    return decide(said, chosen);
  }

  /** What the first record of the plain segment file at {@code path} says. */
  static Dialect segmentSays(Path path) throws IOException {
    return probe(path).found;
  }

  /** The longest first record read to tell a segment's dialect (the core's MAX_RECORD_PROBE). */
  private static final long MAX_RECORD_PROBE = 64L << 20;
  /** How far past a damaged first record a record marker is looked for (MARKER_WINDOW). */
  private static final int MARKER_WINDOW = 1 << 20;
  /** Bytes of a record header read before its data, under either framing. */
  private static final int PROBE_HEADER = 20;

  /** What a segment's first record says (the core's {@code log/dialect.rs} {@code Probe}). */
  private static final class Probe {
    Dialect found;
    String why;
    /** Written, neither framing reads it, and a record marker follows it. */
    boolean undecided;
  }

  /**
   * The core's {@code probe_plain_segment}: the first record's framing; where it reads in
   * neither (damaged), the record its length leads to under one framing alone; where that says
   * nothing either, whether records follow it (undecided).
   */
  private static Probe probe(Path path) throws IOException {
    Probe p = new Probe();
    if (!Files.isRegularFile(path)) {
      return p;
    }
    try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
      long available = ch.size() - SegmentReader.HEADER_LEN;
      if (available < 0) {
        return p;
      }
      ByteBuffer header = readAt(ch, SegmentReader.HEADER_LEN, PROBE_HEADER);
      boolean written = false;
      for (int i = 0; i < Math.min(header.limit(), 4); i++) {
        written |= header.get(i) != 0; // not the end marker, nor a preallocated tail
      }
      long reach = firstRecordReach(header, available);
      if (reach > MAX_RECORD_PROBE) {
        return p; // the metadata file and the snapshot still speak
      }
      ByteBuffer record = readAt(ch, SegmentReader.HEADER_LEN, (int) reach);
      p.found = recordSays(record, 0, record.limit());
      p.why = "its first record's framing and checksum";
      if (p.found == null && written) {
        Dialect second = null;
        int seconds = 0;
        for (Dialect d : values()) {
          if (secondRecordSays(ch, header, available, d)) {
            second = d;
            seconds++;
          }
        }
        if (seconds == 1) {
          p.found = second;
          p.why = "its first record is damaged, but the " + second.label + " framing's length "
              + "of it leads to a second record of that framing";
        }
      }
      if (p.found == null && written) {
        ByteBuffer b = readAt(ch, SegmentReader.HEADER_LEN, (int) Math.min(available,
            MARKER_WINDOW));
        for (int i = 4; i + 4 <= b.limit() && !p.undecided; i++) {
          p.undecided = b.getInt(i) == SegmentReader.RECORD_MARKER;
        }
      }
      return p;
    }
  }

  /** Up to {@code n} bytes of {@code ch} from {@code at} (fewer at its end), flipped to read. */
  private static ByteBuffer readAt(FileChannel ch, long at, int n) throws IOException {
    ByteBuffer b = ByteBuffer.allocate(n);
    while (b.hasRemaining() && ch.read(b, at + b.position()) > 0) {
      // read on
    }
    b.flip();
    return b;
  }

  /**
   * The core's {@code first_record_reach}: the longer of the two framings' reach for the lengths
   * {@code header} holds, leaving out a framing whose record would end past {@code available}
   * (it cannot parse: a spec record's bytes read as a taskflux length start with the delta's
   * marker, 0x41.. and up, and reading towards that read every segment whole).
   */
  private static long firstRecordReach(ByteBuffer header, long available) {
    long reach = PROBE_HEADER;
    if (header.limit() >= 16) {
      long spec = 16L + Math.max(header.getInt(12), 0) + 3;
      reach = spec <= available ? Math.max(reach, spec) : reach;
    }
    if (header.limit() >= 20) {
      long taskflux = 20L + Math.max(header.getInt(16), 0);
      reach = taskflux <= available ? Math.max(reach, taskflux) : reach;
    }
    return Math.min(reach, available);
  }

  /**
   * The core's {@code second_record_at} and {@code second_record_says}: whether the record that
   * {@code d}'s length of a damaged first record leads to parses under {@code d} alone.
   */
  private static boolean secondRecordSays(FileChannel ch, ByteBuffer header, long available,
      Dialect d) throws IOException {
    if (header.limit() < d.lenAt + 4) {
      return false;
    }
    int n = header.getInt(d.lenAt);
    if (n < 0) {
      return false;
    }
    long at = d.recordLen(n);
    if (at >= available) {
      return false;
    }
    long left = available - at;
    long offset = SegmentReader.HEADER_LEN + at;
    ByteBuffer second = readAt(ch, offset, (int) Math.min(PROBE_HEADER, left));
    long reach = firstRecordReach(second, left);
    if (reach > MAX_RECORD_PROBE) {
      return false;
    }
    ByteBuffer record = readAt(ch, offset, (int) reach);
    return recordSays(record, 0, record.limit()) == d;
  }

  private interface Says {
    Dialect of(ByteBuffer b, int len);
  }

  private static void add(List<Said> said, Path path, int most, Says says, String why)
      throws IOException {
    if (!Files.isRegularFile(path)) {
      return;
    }
    long size = Files.size(path);
    if (size == 0 || size > most) {
      return; // empty says nothing; a large snapshot is told by its own reader's checks
    }
    ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(path));
    Dialect d = says.of(b, b.limit());
    if (d != null) {
      said.add(new Said(d, path.toString(), why));
    }
  }

  static Dialect decide(List<Said> said, Dialect chosen) {
    if (said.isEmpty()) {
      return chosen != null ? chosen : SPEC;
    }
    Said first = said.get(0);
    for (Said s : said) {
      if (s.dialect != first.dialect) {
        throw new CorruptException(s.path, -1, "files of two dialects in one directory: this "
            + "file is in the " + s.dialect.label + " dialect (" + s.why + "), but "
            + first.path + " is in the " + first.dialect.label + " dialect (" + first.why + ")");
      }
    }
    if (chosen != null && chosen != first.dialect) {
      throw new CorruptException(first.path, -1, "the " + chosen.label + " dialect was asked "
          + "for, but this file is in the " + first.dialect.label + " dialect (" + first.why
          + ")");
    }
    return first.dialect;
  }
}
