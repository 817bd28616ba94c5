package io.tflux.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.zip.CRC32;

/**
 * Reads the records of one segment file (spec 3) whose start offsets lie in a byte range, the
 * JVM twin of the core's {@code read_segment_deltas} (log/recovery/scan.rs {@code scan_segment} plus
 * {@code format/record.rs}): the same header classification, framing checks, CRC, term order,
 * torn-tail rules and error wording. Differential tests hold the two equal.
 *
 * <p>A segment may be split into byte ranges read by different tasks. Records are not
 * self-synchronising (a message may contain the record marker), so a reader whose range starts
 * past offset 8 walks the frames before it (checking framing and terms, not CRCs: the task that
 * owns those records checks them and fails the job on a mismatch). Only sealed segments are
 * split: in the active segment a bad CRC ends the valid data, which only a CRC check can see.
 */
final class SegmentReader {
  static final int FILE_MARKER = 0x1276AD55;
  static final int VERSION = 1;
  static final int HEADER_LEN = 8;
  static final int RECORD_MARKER = 0xAAF534C4;

  /** One decoded record: its LSN, term and where its data lies in {@link #buf}. */
  interface Visitor {
    void record(long lsn, int term, int dataAt, int dataLen, long fileOffset);
  }

  final String path;
  /** How the records are framed (spec section 11). */
  final Dialect dialect;
  final long firstLsn;
  /** The active (last) segment: a torn tail ends its data instead of failing. */
  final boolean last;
  final long ownStart;
  final long ownEnd;
  /** The LSN the records must reach (a sealed segment's last chunk), or Long.MIN_VALUE. */
  final long wantLast;

  ByteBuffer buf;
  int len;
  int at;
  long lsn;
  int prevTerm;
  boolean done;
  /** A compressed segment's last LSN from its header (checked at its end), or MIN_VALUE. */
  long zLast = Long.MIN_VALUE;

  private final CRC32 crc = new CRC32();
  private ByteBuffer dup;

  // The frame parse() just read.
  private int term;
  private int dataLen;
  private int next;
  private String bad;

  SegmentReader(Dialect dialect, String path, long firstLsn, boolean last, long ownStart,
      long ownEnd, long wantLast) {
    this.dialect = dialect;
    this.path = path;
    this.firstLsn = firstLsn;
    this.last = last;
    this.ownStart = ownStart;
    this.ownEnd = ownEnd;
    this.wantLast = wantLast;
  }

  /** Maps the file, checks its header and walks to the first record of the range. */
  SegmentReader open() throws IOException {
    return open(null);
  }

  /**
   * {@link #open()}, showing the records before the range to {@code walk} (CRCs unchecked: the
   * task that owns them checks them).
   */
  SegmentReader open(Visitor walk) throws IOException {
    buf = map(Paths.get(path));
    if (path.endsWith(".log.z")) {
      Compressed z = Compressed.decode(path, buf, firstLsn);
      buf = z.original;
      zLast = z.lastLsn;
    }
    len = buf.limit();
    at = HEADER_LEN;
    lsn = firstLsn;
    prevTerm = 0;
    String header = checkHeader(buf, len);
    if (header != null) {
      if (last && header.isEmpty()) {
        done = true; // a crash during creation: no records yet
        return this;
      }
      throw new CorruptException(path, 0, header.isEmpty()
          ? "segment header missing (file empty or all zeros)" : header);
    }
    while (!done && at < ownStart) {
      step(false, walk);
    }
    return this;
  }

  static ByteBuffer map(Path path) throws IOException {
    checkRegular(path);
    try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
      long size = ch.size();
      if (size > Integer.MAX_VALUE) {
        throw new CorruptException(path.toString(), -1, "segment file of " + size
            + " bytes is larger than the JVM reader maps (2 GiB); use format tflux_python");
      }
      if (size == 0) {
        return ByteBuffer.allocate(0);
      }
      MappedByteBuffer m = ch.map(FileChannel.MapMode.READ_ONLY, 0, size);
      return m;
    }
  }

  /** A segment's name on something that is not a regular file (a directory, a FIFO, gone). */
  static void checkRegular(Path path) {
    if (!Files.isRegularFile(path)) {
      throw new CorruptException(path.toString(), -1,
          "named like a segment but is not a regular file: its records cannot be read");
    }
  }

  /**
   * Null for a valid header; "" for an uninitialised one (shorter than a header, or a prefix of
   * the header followed only by zeros: a crash during creation); else the corruption message.
   */
  static String checkHeader(ByteBuffer b, int len) {
    byte[] want = {0x12, 0x76, (byte) 0xAD, 0x55, 0, 0, 0, 1};
    if (len < HEADER_LEN) {
      boolean prefix = true;
      boolean zeros = true;
      for (int i = 0; i < len; i++) {
        prefix &= b.get(i) == want[i];
        zeros &= b.get(i) == 0;
      }
      return prefix || zeros ? "" : "bad segment file marker (expected 12 76 AD 55)";
    }
    boolean valid = true;
    for (int i = 0; i < HEADER_LEN; i++) {
      valid &= b.get(i) == want[i];
    }
    if (valid) {
      return null;
    }
    if (zeroFrom(b, HEADER_LEN, len)) {
      int written = 0;
      for (int i = 0; i < HEADER_LEN; i++) {
        if (b.get(i) != 0) {
          written = i + 1;
        }
      }
      boolean torn = true;
      for (int i = 0; i < written; i++) {
        torn &= b.get(i) == want[i];
      }
      if (torn) {
        return "";
      }
    }
    if (b.getInt(0) != FILE_MARKER) {
      return "bad segment file marker (expected 12 76 AD 55)";
    }
    return "unknown segment format version " + b.getInt(4) + " (expected 1)";
  }

  static boolean zeroFrom(ByteBuffer b, int from, int len) {
    int i = Math.min(from, len);
    for (; i + 8 <= len; i += 8) {
      if (b.getLong(i) != 0) {
        return false;
      }
    }
    for (; i < len; i++) {
      if (b.get(i) != 0) {
        return false;
      }
    }
    return true;
  }

  /** Whether the reader has records left in its range. */
  boolean hasNext() {
    return !done && at < ownEnd;
  }

  /**
   * Reads the next frame; a record of the range (CRC checked) goes to {@code visitor}.
   * Reaching the end of the data ends the reader (checking a sealed segment's last LSN).
   */
  void step(boolean checkCrc, Visitor visitor) {
    int kind = parse(at, checkCrc);
    if (kind == RECORD) {
      boolean spec = dialect == Dialect.SPEC;
      if (term < prevTerm || term < 0) {
        if (spec && last && term == 0 && zeroFrom(buf, at + 4, len)) {
          finish(); // a header torn after its marker reads as an empty record of term 0
          return;
        }
        String why = term < 0 ? "negative term " + term + " (previous " + prevTerm + ")"
            : "term " + term + " lower than the previous record's term " + prevTerm;
        throw new CorruptException(path, at, why);
      }
      if (spec && last && dataLen == 0 && zeroFrom(buf, at + 8, len)) {
        finish(); // an empty record followed by zeros: a header torn after its term
        return;
      }
      if (visitor != null) {
        visitor.record(lsn, term, at + dialect.header, dataLen, at);
      }
      prevTerm = term;
      lsn++;
      at = next;
    } else if (kind == END) {
      finish();
    } else if (last) {
      finish(); // torn tail: the valid data ends here
    } else {
      throw new CorruptException(path, at, bad);
    }
  }

  private void finish() {
    done = true;
    long got = lsn - 1;
    if (zLast != Long.MIN_VALUE && got != zLast && ownEnd == Long.MAX_VALUE) {
      throw new CorruptException(path, 16, "last LSN " + zLast + " at offset 16 does not match"
          + " the records inside (last LSN " + got + ")");
    }
    if (wantLast != Long.MIN_VALUE && got < wantLast) {
      throw new CorruptException(path, -1, "holds entries up to LSN " + got + ", expected "
          + wantLast + " (gap or overlap between segments)");
    }
  }

  static final int RECORD = 0;
  static final int END = 1;
  static final int BAD = 2;

  /** The core's {@code record::parse_in}: never trusts the length field. */
  private int parse(int at, boolean checkCrc) {
    int available = len - at;
    if (available <= 0) {
      return END;
    }
    if (available < 4) {
      bad = "incomplete record header (" + available + " bytes before end of file)";
      return BAD;
    }
    int word = buf.getInt(at);
    if (word == 0) {
      return END;
    }
    if (word != RECORD_MARKER) {
      bad = String.format("bad record marker %02X %02X %02X %02X (expected AA F5 34 C4 or end"
          + " marker)", buf.get(at) & 0xFF, buf.get(at + 1) & 0xFF, buf.get(at + 2) & 0xFF,
          buf.get(at + 3) & 0xFF);
      return BAD;
    }
    if (available < dialect.header) {
      bad = "incomplete record header (" + available + " bytes before end of file)";
      return BAD;
    }
    int stored = buf.getInt(at + dialect.crcAt);
    int n = buf.getInt(at + dialect.lenAt);
    if (n < 0) {
      bad = "negative data length field " + n;
      return BAD;
    }
    long total = dialect.recordLen(n);
    if (total > available) {
      bad = "data length field " + n + " runs past end of file (" + available
          + " bytes available)";
      return BAD;
    }
    if (dialect == Dialect.TASKFLUX) {
      long wide = buf.getLong(at + 4);
      if (wide < 1) {
        bad = "term " + wide + " below 1 (a taskflux record's term is at least 1)";
        return BAD;
      }
      if (wide > Integer.MAX_VALUE) {
        bad = "term " + wide + " above " + Integer.MAX_VALUE
            + ", the largest term tflux supports";
        return BAD;
      }
      term = (int) wide;
    } else {
      term = buf.getInt(at + 4);
    }
    int dataAt = at + dialect.header;
    for (int p = dataAt + n; p < at + total; p++) {
      if (buf.get(p) != 0) {
        bad = "non-zero padding byte";
        return BAD;
      }
    }
    if (checkCrc) {
      int computed = dialect == Dialect.SPEC ? zlibCrc(dataAt, n)
          : Crc32Mpeg2.of(buf, dataAt, dataAt + n);
      if (computed != stored) {
        bad = String.format("checksum mismatch (stored 0x%08x, computed 0x%08x)", stored,
            computed);
        return BAD;
      }
    }
    dataLen = n;
    next = (int) (at + total);
    return RECORD;
  }

  /** CRC-32 (zlib's) of {@code n} bytes at {@code at}, with one checksum object reused. */
  private int zlibCrc(int at, int n) {
    crc.reset();
    if (dup == null) {
      dup = buf.duplicate();
    }
    dup.limit(at + n);
    dup.position(at);
    crc.update(dup);
    return (int) crc.getValue();
  }
}
