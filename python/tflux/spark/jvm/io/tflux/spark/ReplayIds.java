package io.tflux.spark;

import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;

/**
 * The {@code replayPlan} option of the log reader: replay's small tables (each queue name's
 * AddRecords in earlier segments, and its incarnations' LSN intervals, numbers, adds before
 * them and first ids), so that the scan itself emits an add's record id and the incarnation
 * of an add or remove ({@code replay_id}, {@code inc}) instead of two broadcast joins on
 * strings per row. The rule is replay's ({@code tflux.spark.rebuild}); this only evaluates it:
 * {@code replay_id = base_id + seg_base + queue_adds - adds_before} in the incarnation whose
 * interval {@code [start, end)} holds the entry's LSN. A missing table entry gives nulls, as
 * the joins' missing matches do. {@code replay_key} names (incarnation, id) by one long, so that
 * the removes' join hashes one long: {@code key_base + id} for ids in {@code [1, span]} (every id
 * the incarnation can hold; each incarnation has its own range), else null.
 *
 * <p>Removed ranges: {@code r LO HI} lines after an incarnation's line list the record ids
 * {@code [LO, HI]} removed in it (ascending, disjoint, not adjacent: the driver merged them from
 * the {@code summary} option's ranges). When a plan has them, the scan does not return an
 * AddRecord whose id lies in one, and the snapshot reader ({@link SnapshotSource}) does not
 * return a snapshot record whose id lies in one of its queue's first incarnation: both ask
 * {@link Queue#removed}, the one place that rule lives. Replay then needs no removes' join.
 *
 * <p>Removed bitmaps (issue 45): a {@code b BASE BITS} line after an incarnation's line lists
 * the ids removed in it as a bitmap: {@code BITS} is base64 of little-endian 64-bit words whose
 * bit {@code i} is id {@code BASE + i}. An id is removed when a range or the bitmap holds it.
 *
 * <p>Text form (written by {@code rebuild.py}), one line each: {@code q SOURCE_HEX QUEUE_HEX}
 * starts a queue name (hex of the UTF-8 bytes), then {@code s SEGMENT SEG_BASE} per segment
 * and {@code i INC START END ADDS_BEFORE BASE_ID KEY_BASE SPAN} per incarnation in LSN order,
 * each followed by its {@code r LO HI} lines and {@code b BASE BITS} line, if any.
 */
final class ReplayIds implements Serializable {
  private static final long serialVersionUID = 1L;

  /** One queue name of one source. */
  static final class Queue implements Serializable {
    private static final long serialVersionUID = 1L;
    final Map<String, Long> segBase = new HashMap<>();
    long[] start = new long[0];
    long[] end = new long[0];
    long[] inc = new long[0];
    long[] addsBefore = new long[0];
    long[] baseId = new long[0];
    long[] keyBase = new long[0];
    long[] span = new long[0];
    /** Per incarnation its removed ranges' first and last ids (ascending), or null: none. */
    long[][] removedLo = new long[0][];
    long[][] removedHi = new long[0][];
    /** Per incarnation its removed bitmap (bit i: id {@code bitsBase + i}), or null: none. */
    long[][] bits = new long[0][];
    long[] bitsBase = new long[0];

    /**
     * Whether record {@code id} of incarnation {@code at} was removed: it lies in one of the
     * incarnation's removed ranges (a binary search). The rule for log and snapshot records.
     */
    boolean removed(int at, long id) {
      long[] w = bits[at];
      if (w != null) {
        long i = id - bitsBase[at];
        if (i >= 0 && (i >>> 6) < w.length && ((w[(int) (i >>> 6)] >>> (i & 63)) & 1) != 0) {
          return true;
        }
      }
      long[] lo = removedLo[at];
      if (lo == null) {
        return false;
      }
      int a = 0;
      int b = lo.length - 1;
      int found = -1;
      while (a <= b) { // the last range starting at or before id
        int mid = (a + b) >>> 1;
        if (lo[mid] <= id) {
          found = mid;
          a = mid + 1;
        } else {
          b = mid - 1;
        }
      }
      return found >= 0 && id <= removedHi[at][found];
    }

    /** {@code replay_key} of record {@code id} in incarnation {@code at}, or -1 (null). */
    long key(int at, long id) {
      return id >= 1 && id <= span[at] ? keyBase[at] + id : -1;
    }

    /** The incarnation holding {@code lsn}, or -1. */
    int find(long lsn) {
      int lo = 0;
      int hi = start.length - 1;
      int at = -1;
      while (lo <= hi) { // the last interval starting at or before lsn
        int mid = (lo + hi) >>> 1;
        if (start[mid] <= lsn) {
          at = mid;
          lo = mid + 1;
        } else {
          hi = mid - 1;
        }
      }
      return at >= 0 && lsn < end[at] ? at : -1;
    }
  }

  /** What a scan of one segment file keeps per queue name (see {@link QueueAdds#data}). */
  static final class Resolved {
    static final Resolved NONE = new Resolved(null, false, 0);
    final Queue queue;
    final boolean hasSegBase;
    final long segBase;

    Resolved(Queue queue, boolean hasSegBase, long segBase) {
      this.queue = queue;
      this.hasSegBase = hasSegBase;
      this.segBase = segBase;
    }
  }

  /** Source -> queue name (its bytes as ISO-8859-1 chars) -> queue. */
  final Map<String, Map<String, Queue>> sources = new HashMap<>();
  /** Whether any incarnation has removed ranges (then the scan drops rows). */
  boolean hasRanges;

  static ReplayIds parse(String text) {
    ReplayIds out = new ReplayIds();
    Queue q = null;
    int n = 0;
    java.util.List<long[]> incs = new java.util.ArrayList<>();
    java.util.List<java.util.List<long[]>> ranges = new java.util.ArrayList<>();
    java.util.List<long[]> bitmaps = new java.util.ArrayList<>();
    for (String line : text.split("\n")) {
      n++;
      String t = line.trim();
      if (t.isEmpty()) {
        continue;
      }
      String[] f = t.split(" ");
      try {
        switch (f[0]) {
          case "q":
            finish(q, incs, ranges, bitmaps);
            q = new Queue();
            String source = new String(hex(f[1]), StandardCharsets.UTF_8);
            String name = new String(hex(f.length > 2 ? f[2] : ""),
                StandardCharsets.ISO_8859_1);
            out.sources.computeIfAbsent(source, k -> new HashMap<>()).put(name, q);
            break;
          case "s":
            q.segBase.put(f[1], Long.parseLong(f[2]));
            break;
          case "i":
            long[] r = new long[7];
            for (int i = 0; i < r.length; i++) {
              r[i] = Long.parseLong(f[i + 1]);
            }
            incs.add(r);
            ranges.add(null);
            bitmaps.add(null);
            break;
          case "b":
            if (incs.isEmpty() || bitmaps.get(bitmaps.size() - 1) != null) {
              throw new IllegalArgumentException("a bitmap before any incarnation, or two");
            }
            long at = Long.parseLong(f[1]);
            byte[] raw = java.util.Base64.getDecoder().decode(f.length > 2 ? f[2] : "");
            if (at < 0 || raw.length % 8 != 0) {
              throw new IllegalArgumentException("bitmap base below 0 or not whole words");
            }
            long[] words = new long[raw.length / 8 + 1]; // the last slot holds the base
            ByteBuffer.wrap(raw).order(java.nio.ByteOrder.LITTLE_ENDIAN).asLongBuffer()
                .get(words, 0, raw.length / 8);
            words[words.length - 1] = at;
            bitmaps.set(bitmaps.size() - 1, words);
            out.hasRanges = true;
            break;
          case "r":
            if (incs.isEmpty()) {
              throw new IllegalArgumentException("a range before any incarnation");
            }
            long lo = Long.parseLong(f[1]);
            long hi = Long.parseLong(f[2]);
            java.util.List<long[]> own = ranges.get(ranges.size() - 1);
            if (own == null) {
              own = new java.util.ArrayList<>();
              ranges.set(ranges.size() - 1, own);
            }
            if (lo < 0 || lo > hi || (!own.isEmpty() && lo - 1 <= own.get(own.size() - 1)[1])) {
              throw new IllegalArgumentException("ranges not ascending and apart");
            }
            own.add(new long[] {lo, hi});
            out.hasRanges = true;
            break;
          default:
            throw new IllegalArgumentException("unknown line kind");
        }
      } catch (RuntimeException e) {
        throw new IllegalArgumentException("tflux: option replayPlan, line " + n + " '" + t
            + "': " + e.getMessage(), e);
      }
    }
    finish(q, incs, ranges, bitmaps);
    return out;
  }

  private static void finish(Queue q, java.util.List<long[]> incs,
      java.util.List<java.util.List<long[]>> ranges, java.util.List<long[]> bitmaps) {
    if (q == null) {
      return;
    }
    int n = incs.size();
    q.inc = new long[n];
    q.start = new long[n];
    q.end = new long[n];
    q.addsBefore = new long[n];
    q.baseId = new long[n];
    q.keyBase = new long[n];
    q.span = new long[n];
    q.removedLo = new long[n][];
    q.removedHi = new long[n][];
    q.bits = new long[n][];
    q.bitsBase = new long[n];
    for (int i = 0; i < n; i++) {
      long[] words = bitmaps.get(i);
      if (words != null) {
        q.bitsBase[i] = words[words.length - 1];
        q.bits[i] = java.util.Arrays.copyOf(words, words.length - 1);
      }
      java.util.List<long[]> own = ranges.get(i);
      if (own != null) {
        q.removedLo[i] = new long[own.size()];
        q.removedHi[i] = new long[own.size()];
        for (int j = 0; j < own.size(); j++) {
          q.removedLo[i][j] = own.get(j)[0];
          q.removedHi[i][j] = own.get(j)[1];
        }
      }
      long[] r = incs.get(i);
      q.inc[i] = r[0];
      q.start[i] = r[1];
      q.end[i] = r[2];
      q.addsBefore[i] = r[3];
      q.baseId[i] = r[4];
      q.keyBase[i] = r[5];
      q.span[i] = r[6];
      if (i > 0 && q.start[i] < q.start[i - 1]) {
        throw new IllegalArgumentException("incarnations out of LSN order");
      }
    }
    incs.clear();
    ranges.clear();
    bitmaps.clear();
  }

  private static byte[] hex(String s) {
    if (s.length() % 2 != 0) {
      throw new IllegalArgumentException("odd hex length");
    }
    byte[] b = new byte[s.length() / 2];
    for (int i = 0; i < b.length; i++) {
      b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
    }
    return b;
  }

  /** The queues of {@code source} (null: none planned). */
  Map<String, Queue> source(String source) {
    return sources.get(source);
  }

  /** What {@code segment}'s scan needs of the queue named {@code buf[at, at + len)}. */
  static Resolved resolve(Map<String, Queue> queues, String segment, ByteBuffer buf, int at,
      int len) {
    if (queues == null) {
      return Resolved.NONE;
    }
    char[] name = new char[len];
    for (int i = 0; i < len; i++) {
      name[i] = (char) (buf.get(at + i) & 0xFF);
    }
    Queue q = queues.get(new String(name));
    if (q == null) {
      return Resolved.NONE;
    }
    Long base = q.segBase.get(segment);
    return new Resolved(q, base != null, base == null ? 0 : base);
  }
}
