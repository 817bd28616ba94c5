package io.tflux.spark;

import java.nio.ByteBuffer;
import java.util.Arrays;

/**
 * The {@code queue_adds} column's running counts: AddRecords per queue name since the start of
 * the segment (from the scan's first LSN), keyed by the name's bytes in an open-addressing table
 * so that counting allocates nothing per record. Replay turns them into record ids with a small
 * table of per-(queue, segment) offsets instead of a window over every entry.
 */
final class QueueAdds {
  private byte[][] keys = new byte[16][];
  private long[] counts = new long[16];
  /** Per slot: what the scan derived once from the name (replay's {@link ReplayIds.Resolved}). */
  private Object[] data = new Object[16];
  private int size;
  /** The slot of the previous lookup (logs often hold runs of one queue). */
  private int lastSlot = -1;

  /** Forgets every count (a new segment starts). */
  void clear() {
    Arrays.fill(keys, null);
    Arrays.fill(counts, 0);
    Arrays.fill(data, null);
    size = 0;
    lastSlot = -1;
  }

  /** Counts one AddRecord of the queue named {@code buf[at, at + len)}; returns its count. */
  long add(ByteBuffer buf, int at, int len) {
    return add(buf, at, len, false);
  }

  /**
   * {@link #add(ByteBuffer, int, int)}; {@code same}: the caller knows the name is the one of
   * the previous lookup (then it is not compared again).
   */
  long add(ByteBuffer buf, int at, int len, boolean same) {
    int s = same && lastSlot >= 0 ? lastSlot : slot(buf, at, len); // first: it may grow
    return ++counts[s];
  }

  /** The AddRecords counted so far for the queue named {@code buf[at, at + len)}. */
  long get(ByteBuffer buf, int at, int len) {
    return get(buf, at, len, false);
  }

  /** {@link #get(ByteBuffer, int, int)}; {@code same} as for {@link #add}. */
  long get(ByteBuffer buf, int at, int len, boolean same) {
    int s = same && lastSlot >= 0 ? lastSlot : slot(buf, at, len); // first: it may grow
    return counts[s];
  }

  /** How many slots there are (for {@link #key} and {@link #data} over all of them). */
  int slots() {
    return keys.length;
  }

  /** The queue name of {@code slot}, or null for a free slot. */
  byte[] key(int slot) {
    return keys[slot];
  }

  /** The slot of the name of the last {@link #add} or {@link #get}. */
  int lastSlot() {
    return lastSlot;
  }

  Object data(int slot) {
    return data[slot];
  }

  void setData(int slot, Object value) {
    data[slot] = value;
  }

  /**
   * Counts the delta in {@code buf[at, at + len)} when it is an AddRecord with a readable queue
   * name (the walk to a split's first record; the task that owns a bad delta reports it).
   */
  void countDelta(ByteBuffer buf, int at, int len) {
    if (len < 2 || buf.get(at) != 'A') {
      return;
    }
    int n = buf.get(at + 1) & 0xFF;
    if (2 + n <= len) {
      add(buf, at + 2, n);
    }
  }

  private int slot(ByteBuffer buf, int at, int len) {
    if (lastSlot >= 0 && same(keys[lastSlot], buf, at, len)) {
      return lastSlot;
    }
    int h = 0x811C9DC5;
    for (int i = 0; i < len; i++) {
      h = (h ^ (buf.get(at + i) & 0xFF)) * 0x01000193;
    }
    int mask = keys.length - 1;
    int s = (h ^ (h >>> 16)) & mask;
    while (keys[s] != null) {
      if (same(keys[s], buf, at, len)) {
        lastSlot = s;
        return s;
      }
      s = (s + 1) & mask;
    }
    byte[] key = new byte[len];
    for (int i = 0; i < len; i++) {
      key[i] = buf.get(at + i);
    }
    keys[s] = key;
    size++;
    if (2 * size > keys.length) {
      grow();
      return slot(buf, at, len);
    }
    lastSlot = s;
    return s;
  }

  private void grow() {
    byte[][] oldKeys = keys;
    long[] oldCounts = counts;
    Object[] oldData = data;
    keys = new byte[oldKeys.length * 2][];
    counts = new long[oldKeys.length * 2];
    data = new Object[oldKeys.length * 2];
    lastSlot = -1;
    int mask = keys.length - 1;
    for (int i = 0; i < oldKeys.length; i++) {
      byte[] k = oldKeys[i];
      if (k == null) {
        continue;
      }
      int h = 0x811C9DC5;
      for (byte b : k) {
        h = (h ^ (b & 0xFF)) * 0x01000193;
      }
      int s = (h ^ (h >>> 16)) & mask;
      while (keys[s] != null) {
        s = (s + 1) & mask;
      }
      keys[s] = k;
      counts[s] = oldCounts[i];
      data[s] = oldData[i];
    }
  }

  private static boolean same(byte[] key, ByteBuffer buf, int at, int len) {
    if (key.length != len) {
      return false;
    }
    for (int i = 0; i < len; i++) {
      if (key[i] != buf.get(at + i)) {
        return false;
      }
    }
    return true;
  }
}
