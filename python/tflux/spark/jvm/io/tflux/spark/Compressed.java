package io.tflux.spark;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.zip.CRC32;

/**
 * A compressed sealed segment ({@code NNN.log.z}, spec 9) decoded back to the original segment
 * bytes, the JVM twin of the core's {@code format/compressed.rs}: the same header checks and
 * wording, zstd through zstd-jni and lz4 frames through lz4-java (both ship with Spark). The
 * output grows with the decoded data and stops past the header's original length, so a lying
 * header allocates nothing by itself. Memory is checked before decoding (what the header
 * declares, against what this JVM has free) and an allocation that fails anyway is this file's
 * error: a decompression bomb fails the query, never the driver or the executor.
 */
final class Compressed {
  static final int FILE_MARKER = 0x1276AD5A;
  static final int HEADER_LEN = 37;
  static final long MIN_ORIGINAL_LEN = 12;
  /** The core's {@code format::compressed::MAX_ORIGINAL_LEN}: a sealed segment is at most its
   * hard limit plus one record, and a larger one is never compressed. */
  static final long MAX_ORIGINAL_LEN = 1L << 31;

  final ByteBuffer original;
  final long lastLsn;

  private Compressed(ByteBuffer original, long lastLsn) {
    this.original = original;
    this.lastLsn = lastLsn;
  }

  static Compressed decode(String path, ByteBuffer file, long namedLsn) {
    int size = file.limit();
    if (size < HEADER_LEN) {
      throw bad(path, 0, "compressed segment shorter than its 37-byte header (" + size
          + " bytes)");
    }
    if (file.getInt(0) != FILE_MARKER) {
      throw bad(path, 0, "bad file marker at offset 0 (expected 12 76 AD 5A)");
    }
    int version = file.getInt(4);
    if (version != 1) {
      throw bad(path, 4, "unknown compressed segment version " + version
          + " at offset 4 (expected 1)");
    }
    long first = file.getLong(8);
    if (first < 0) {
      throw bad(path, 8, "first LSN " + first + " at offset 8 is negative");
    }
    if (first != namedLsn) {
      throw bad(path, 8, "first LSN " + first + " at offset 8 does not match the file name ("
          + namedLsn + ")");
    }
    long last = file.getLong(16);
    if (last < first - 1) {
      throw bad(path, 16, "last LSN " + last + " at offset 16 is before the first LSN " + first
          + " - 1");
    }
    int method = file.get(24) & 0xFF;
    if (method != 1 && method != 2) {
      throw bad(path, 24, "unknown compression method " + method
          + " at offset 24 (expected 1 = zstd or 2 = lz4)");
    }
    long want = file.getLong(25);
    if (want < MIN_ORIGINAL_LEN || want > MAX_ORIGINAL_LEN) {
      throw bad(path, 25, "original length " + want + " at offset 25 is outside ["
          + MIN_ORIGINAL_LEN + ", " + MAX_ORIGINAL_LEN + "]");
    }
    if (want > Integer.MAX_VALUE - 64) {
      throw bad(path, 25, "original length " + want
          + " is larger than the JVM reader decodes (2 GiB); use format tflux_python");
    }
    // Growing to `want` holds at most half of it twice over (the old array and its copy).
    long needs = want + want / 2;
    long free = headroom();
    if (needs > free) {
      throw bad(path, 25, "original length " + want + " at offset 25 needs " + needs
          + " bytes to decode and this JVM has " + free + " free (give it more memory, or read"
          + " with format tflux_python)");
    }
    int crcWant = file.getInt(33);
    ByteBuffer payload = file.duplicate();
    payload.position(HEADER_LEN);
    byte[] out;
    int n = 0;
    try (InputStream in = method == 1
        ? new com.github.luben.zstd.ZstdInputStream(new BufferInput(payload))
        : new net.jpountz.lz4.LZ4FrameInputStream(new BufferInput(payload))) {
      out = new byte[(int) Math.min(want, 32L << 20)];
      while (true) {
        if (n == out.length) {
          if (n > want) {
            break;
          }
          out = Arrays.copyOf(out, (int) Math.min((long) n * 2, want + 1));
        }
        int got = in.read(out, n, out.length - n);
        if (got < 0) {
          break;
        }
        n += got;
        if (n > want) {
          break;
        }
      }
    } catch (IOException | RuntimeException e) {
      throw bad(path, HEADER_LEN, "payload at offset 37 does not decode (" + e.getMessage()
          + ")");
    } catch (OutOfMemoryError e) {
      // A failed array allocation leaves the heap as it was: the query fails, the JVM goes on.
      throw bad(path, 25, "original length " + want + " at offset 25: out of memory after "
          + "decoding " + n + " bytes (give the JVM more memory, or read with format "
          + "tflux_python)");
    }
    if (n != want) {
      throw bad(path, 25, "payload decodes to " + (n > want ? "more than " + want : n)
          + " bytes, the header at offset 25 says " + want);
    }
    CRC32 crc = new CRC32();
    crc.update(out, 0, n);
    int got = (int) crc.getValue();
    if (got != crcWant) {
      throw bad(path, 33, String.format("decoded bytes have CRC %08x, the header at offset 33"
          + " says %08x", got, crcWant));
    }
    return new Compressed(ByteBuffer.wrap(out, 0, n).slice(), last);
  }

  /** Bytes this JVM can still allocate: its maximum heap less what is in use. */
  static long headroom() {
    Runtime rt = Runtime.getRuntime();
    return rt.maxMemory() - (rt.totalMemory() - rt.freeMemory());
  }

  private static CorruptException bad(String path, long offset, String why) {
    return new CorruptException(path, offset, why);
  }

  /** An InputStream over a ByteBuffer (the mapped payload). */
  static final class BufferInput extends InputStream {
    private final ByteBuffer b;

    BufferInput(ByteBuffer b) {
      this.b = b;
    }

    @Override
    public int read() {
      return b.hasRemaining() ? b.get() & 0xFF : -1;
    }

    @Override
    public int read(byte[] dst, int off, int len) {
      if (!b.hasRemaining()) {
        return -1;
      }
      int n = Math.min(len, b.remaining());
      b.get(dst, off, n);
      return n;
    }

    @Override
    public int available() {
      return b.remaining();
    }
  }
}
