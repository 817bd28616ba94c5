package io.tflux.spark;

import java.nio.ByteBuffer;

/**
 * CRC-32/MPEG-2, the taskflux dialect's checksum (spec section 11: poly 0x04C11DB7, init
 * 0xFFFFFFFF, no reflection, no final xor; "123456789" gives 0x0376E6E7). Table-driven,
 * slice-by-8: eight bytes per step through eight tables, as zlib's and the core's
 * ({@code crc-fast}) readers do for their own polynomials. The shared vectors
 * ({@code tests/data/taskflux/manifest.json}) hold it equal to the core's.
 */
final class Crc32Mpeg2 {
  private Crc32Mpeg2() {}

  private static final int POLY = 0x04C11DB7;
  /** {@code T[s][i]}: the CRC register after byte {@code i} followed by {@code s} zero bytes. */
  private static final int[][] T = new int[8][256];

  static {
    for (int i = 0; i < 256; i++) {
      int c = i << 24;
      for (int k = 0; k < 8; k++) {
        c = (c & 0x80000000) != 0 ? (c << 1) ^ POLY : c << 1;
      }
      T[0][i] = c;
    }
    for (int s = 1; s < 8; s++) {
      for (int i = 0; i < 256; i++) {
        int prev = T[s - 1][i];
        T[s][i] = (prev << 8) ^ T[0][prev >>> 24];
      }
    }
  }

  /** The checksum of {@code b[from, to)} (absolute indexes; the buffer must be big-endian). */
  static int of(ByteBuffer b, int from, int to) {
    int crc = 0xFFFFFFFF;
    int i = from;
    for (; i + 8 <= to; i += 8) {
      int hi = crc ^ b.getInt(i);
      int lo = b.getInt(i + 4);
      crc = T[7][hi >>> 24] ^ T[6][(hi >>> 16) & 0xFF] ^ T[5][(hi >>> 8) & 0xFF]
          ^ T[4][hi & 0xFF] ^ T[3][lo >>> 24] ^ T[2][(lo >>> 16) & 0xFF]
          ^ T[1][(lo >>> 8) & 0xFF] ^ T[0][lo & 0xFF];
    }
    for (; i < to; i++) {
      crc = (crc << 8) ^ T[0][((crc >>> 24) ^ b.get(i)) & 0xFF];
    }
    return crc;
  }

  static int of(byte[] bytes) {
    return of(ByteBuffer.wrap(bytes), 0, bytes.length);
  }
}
