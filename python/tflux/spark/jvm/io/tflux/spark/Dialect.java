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
   * What a snapshot says: the wide marker is spec; under the shared marker, the header whose
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
    if (marker != Snapshot.MARKER) {
      return null;
    }
    boolean spec = snapshotFits(SPEC, b, len, 12);
    boolean taskflux = snapshotFits(TASKFLUX, b, len, 20);
    return spec == taskflux ? null : spec ? SPEC : TASKFLUX;
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
   * else spec.
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
    if (src.logDir != null) {
      // The first record of every segment (the core's log_says, issue 43): a segment of the
      // other dialect anywhere in the log is found, never read as a torn tail.
      for (String name : Sources.segmentNames(src.logDir)) {
        if (!name.endsWith(".log")) {
          continue; // a compressed segment exists only in the spec dialect (its own header)
        }
        Path segment = Paths.get(src.logDir, name);
        Dialect d = segmentSays(segment);
        if (d != null) {
          said.add(new Said(d, segment.toString(), "its first record's framing and checksum"));
        }
      }
    }
    return decide(said, chosen);
  }

  /** What the first record of the plain segment file at {@code path} says. */
  static Dialect segmentSays(Path path) throws IOException {
    if (!Files.isRegularFile(path)) {
      return null;
    }
    try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
      long size = ch.size();
      int want = (int) Math.min(size, 64L << 20);
      ByteBuffer head = ByteBuffer.allocate(Math.min(want, 28));
      ch.read(head, 0);
      if (head.position() < SegmentReader.HEADER_LEN + 16) {
        return null;
      }
      long specLen = 16L + Math.max(head.getInt(8 + 12), 0) + 3;
      long taskLen = 20L + Math.max(head.position() >= 28 ? head.getInt(8 + 16) : 0, 0);
      // As the core's first_record_reach: a framing whose record would end past the file
      // cannot parse and is not read towards (a spec record's bytes read as a taskflux length
      // start with the delta's marker, 0x41.. and up: capping that at the file's size read
      // every segment whole to decide its dialect).
      long available = size - SegmentReader.HEADER_LEN;
      long probe = 20;
      if (specLen <= available) {
        probe = Math.max(probe, specLen);
      }
      if (taskLen <= available) {
        probe = Math.max(probe, taskLen);
      }
      long reach = Math.min(probe + SegmentReader.HEADER_LEN, size);
      if (reach > (64L << 20)) {
        return null;
      }
      ByteBuffer b = ByteBuffer.allocate((int) reach);
      while (b.hasRemaining() && ch.read(b, b.position()) > 0) {
        // read on
      }
      return recordSays(b, SegmentReader.HEADER_LEN, b.position());
    }
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
