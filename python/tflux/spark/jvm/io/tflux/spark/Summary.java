package io.tflux.spark;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The {@code summary} option (replay's first step): instead of one row per entry, a chunk
 * gives one row per queue name with AddRecords or RemoveRecords in it ({@code last}: the last
 * LSN of those, {@code adds}: its {@code queue_adds} there, {@code removes}: its RemoveRecords)
 * and one row per CreateQueue/DeleteQueue ({@code ev_lsn}, {@code ev_kind}, {@code ev_impl},
 * with the adds of its queue before it). Aggregating these by (queue, segment, event) gives what aggregating the
 * entries would, from a few rows per segment instead of a hash aggregate over every entry.
 * Every entry is still decoded and checked by {@link LogColumns}.
 *
 * <p>When Spark asks for the {@code rm_*} columns, the RemoveRecords' ids also come as ranges:
 * per queue name and <em>group</em> (the removes of that name in the chunk between two of its
 * CreateQueue/DeleteQueue, so a group lies in one incarnation), its ids sorted and merged into
 * runs of consecutive ids, one row each: {@code rm_lo}, {@code rm_hi} (inclusive), {@code rm_lsn}
 * (the group's first RemoveRecord's LSN: the driver places the range in its incarnation by it)
 * and {@code rm_count} (the RemoveRecords in it; more than {@code rm_hi - rm_lo + 1} means an id
 * removed twice). A chunk whose runs exceed {@code maxRuns} gives instead one overflow row
 * ({@code rm_lo} and {@code rm_hi} null, {@code rm_lsn} the chunk's first RemoveRecord's LSN,
 * {@code rm_count} its RemoveRecords) and the driver does without ranges. Memory: the ids
 * buffered per name grow with the ids read (sorted and merged every {@link #BUFFER} of them) and
 * the runs are bounded by {@code maxRuns}; nothing is sized by a length read from the file.
 *
 * <p>Bitmaps (issue 45): a group whose runs pass {@link #BITS_AFTER_RUNS} (scattered acks, as a
 * priority queue's) keeps its ids as a bitmap instead, and gives one row whose {@code rm_bits}
 * (the other rows have it null) holds bit {@code i} for id {@code rm_lo + i} (little-endian
 * 64-bit words; {@code rm_hi} the last id the words cover, {@code rm_count} its RemoveRecords).
 * The chunk's bitmaps hold at most {@code maxBits} bits (option {@code summaryBits}, default
 * {@link #MAX_BITS}); past that the chunk overflows as above. A bitmap grows to the ids it is
 * given (at least doubling), within that bound.
 *
 * <p>A bitmap's row also says which LSNs it stands for: {@code rm_from..rm_to} (inclusive), the
 * LSNs of the chunk around the group that hold no CreateQueue/DeleteQueue of its name (from the
 * chunk's first entry or the name's event before the group, to the chunk's last entry or the
 * name's event after it). Two bitmaps of a name whose intervals touch are of one incarnation:
 * {@link BitsFold} ORs them into one on the executors, so the driver gets one bitmap per
 * incarnation instead of one per chunk (issue 45: at 64M deltas those were 774 MB).
 */
final class Summary {
  static final String[] NAMES = {"source", "segment", "queue", "last", "adds", "removes",
      "ev_lsn", "ev_kind", "ev_impl", "rm_lo", "rm_hi", "rm_lsn", "rm_count", "rm_bits", "rm_from",
      "rm_to"};
  static final DataType[] TYPES = {DataTypes.StringType, DataTypes.StringType,
      DataTypes.StringType, DataTypes.LongType, DataTypes.LongType, DataTypes.LongType,
      DataTypes.LongType, DataTypes.StringType, DataTypes.IntegerType, DataTypes.LongType,
      DataTypes.LongType, DataTypes.LongType, DataTypes.LongType, DataTypes.BinaryType,
      DataTypes.LongType, DataTypes.LongType};
  /** Runs per chunk before it gives an overflow row instead (option {@code summaryRuns}). */
  static final int MAX_RUNS = 1 << 16;
  /** Ids a name buffers before they are sorted and merged into its runs. */
  static final int BUFFER = 4096;
  /** Runs of one group past which its ids become a bitmap (see {@link Summary}). */
  static final int BITS_AFTER_RUNS = 1024;
  /** Bits of bitmaps per chunk before it gives an overflow row (option {@code summaryBits}). */
  static final long MAX_BITS = 1L << 27;

  static StructType schema() {
    List<StructField> fields = new ArrayList<>();
    for (int i = 0; i < NAMES.length; i++) {
      fields.add(DataTypes.createStructField(NAMES[i], TYPES[i], true));
    }
    return DataTypes.createStructType(fields);
  }

  /** Per queue slot of {@link QueueAdds}: what the chunk held of that queue. */
  static final class PerQueue {
    /** Over its AddRecords and RemoveRecords only (a queue of events alone has no row). */
    long last = Long.MIN_VALUE;
    long adds;
    long removes;
    long entries;
    /** The open group's ids not yet merged, and its runs (see {@link Summary}). */
    long[] ids;
    int buffered;
    long[] lo;
    long[] hi;
    long[] count;
    int runs;
    long groupLsn = Long.MIN_VALUE;
    /** The open group's ids as a bitmap (null: runs): bit i is id {@code bitsBase + i}. */
    long[] bits;
    long bitsBase;
    long bitsCount;
    /** The LSN of the name's last CreateQueue/DeleteQueue in the chunk (none: MIN_VALUE). */
    long eventLsn = Long.MIN_VALUE;
  }

  /** One CreateQueue or DeleteQueue. */
  private static final class Event {
    final byte[] queue;
    final long lsn;
    final int kind;
    final int impl;
    final long addsBefore;

    Event(byte[] queue, long lsn, int kind, int impl, long addsBefore) {
      this.queue = queue;
      this.lsn = lsn;
      this.kind = kind;
      this.impl = impl;
      this.addsBefore = addsBefore;
    }
  }

  private final QueueAdds adds;
  private final List<Event> events = new ArrayList<>();
  private final StructType readSchema;
  /** Whether Spark asked for the ranges ({@code rm_*} columns). */
  private final boolean ranges;
  private final int maxRuns;
  /** The closed groups' range rows of the chunk, and the runs held (closed and open). */
  private final List<Object[]> rangeRows = new ArrayList<>();
  private long runsHeld;
  /** The chunk's runs exceeded {@link #maxRuns}: no ranges, one overflow row. */
  private boolean overflow;
  private long firstRemoveLsn = Long.MIN_VALUE;
  private long chunkRemoves;
  /** Words the chunk's bitmaps may hold, and hold (open and closed groups). */
  private final long maxWords;
  private long wordsHeld;
  /** The LSNs of the chunk's first and last entries (none yet: MIN_VALUE). */
  private long chunkFirst = Long.MIN_VALUE;
  private long chunkLast = Long.MIN_VALUE;

  Summary(QueueAdds adds, StructType readSchema) {
    this(adds, readSchema, MAX_RUNS, MAX_BITS);
  }

  Summary(QueueAdds adds, StructType readSchema, int maxRuns, long maxBits) {
    this.adds = adds;
    this.readSchema = readSchema;
    this.maxRuns = maxRuns;
    this.maxWords = Math.max(0, maxBits) / 64;
    boolean any = false;
    for (StructField f : readSchema.fields()) {
      any |= f.name().startsWith("rm_");
    }
    this.ranges = any;
  }

  /**
   * One entry of the chunk (after {@link QueueAdds} counted it; its slot is the last one);
   * {@code removed}: a RemoveRecord's record id.
   */
  void entry(int kind, long lsn, long count, int impl, long removed, ByteBuffer buf, int nameAt,
      int nameLen) {
    if (kind >= 4) {
      // Spark's replay applies TaskFlux's four deltas only: a task-queue delta (spec section
      // 12) is refused where it is met, never skipped (rebuild.py refuses it the same way).
      throw new IllegalStateException("tflux ReplayError: Spark replay cannot replay the "
          + LogColumns.KIND_NAMES[kind] + " delta at LSN " + lsn + ": task-queue deltas (spec "
          + "section 12) are replayed by tflux.open and tflux replay only");
    }
    if (chunkFirst == Long.MIN_VALUE) {
      chunkFirst = lsn;
    }
    chunkLast = Math.max(chunkLast, lsn);
    int slot = adds.lastSlot();
    PerQueue q = (PerQueue) adds.data(slot);
    if (q == null) {
      q = new PerQueue();
      adds.setData(slot, q);
    }
    if (kind >= 2) {
      q.last = Math.max(q.last, lsn);
      q.adds = count;
      q.entries++;
      if (kind == 3) {
        q.removes++;
        if (ranges) {
          removed(q, lsn, removed);
        }
      }
    } else {
      byte[] name = new byte[nameLen];
      buf.get(nameAt, name, 0, nameLen);
      events.add(new Event(name, lsn, kind, impl, count));
      if (ranges) {
        closeGroup(q, adds.key(slot), lsn - 1); // the next removes are another incarnation's
      }
      q.eventLsn = lsn;
    }
  }

  private void removed(PerQueue q, long lsn, long id) {
    chunkRemoves++;
    if (firstRemoveLsn == Long.MIN_VALUE) {
      firstRemoveLsn = lsn;
    }
    if (overflow) {
      return;
    }
    if (q.groupLsn == Long.MIN_VALUE) {
      q.groupLsn = lsn;
    }
    if (q.bits != null) {
      setBit(q, id);
      return;
    }
    if (q.ids == null) {
      q.ids = new long[16];
    } else if (q.buffered == q.ids.length) {
      if (q.ids.length < BUFFER) {
        q.ids = Arrays.copyOf(q.ids, q.ids.length * 2);
      } else {
        merge(q);
        if (overflow) {
          return;
        }
        if (q.bits != null) {
          setBit(q, id);
          return;
        }
      }
    }
    q.ids[q.buffered++] = id;
  }

  /** Sets id {@code id} (>= 0) in the bitmap of {@code q}, growing it within the chunk's bound. */
  private void setBit(PerQueue q, long id) {
    long word = id >>> 6;
    long first = q.bitsBase >>> 6;
    int len = q.bits.length;
    if (word < first || word >= first + len) {
      long lo = Math.min(word, first);
      long hi = Math.max(word, first + len - 1);
      long room = maxWords - (wordsHeld - len);
      long want = Math.min(Math.max(hi - lo + 1, 2L * len), room);
      if (want < hi - lo + 1 || want > Integer.MAX_VALUE - 8) {
        overflow = true;
        forgetRanges();
        return;
      }
      if (word < first) { // grow down, keeping the top
        lo = Math.max(0, hi - want + 1);
      }
      long[] grown = new long[(int) want];
      System.arraycopy(q.bits, 0, grown, (int) (first - lo), len);
      wordsHeld += want - len;
      q.bits = grown;
      q.bitsBase = lo << 6;
    }
    q.bits[(int) (word - (q.bitsBase >>> 6))] |= 1L << (id & 63);
    q.bitsCount++;
  }

  /**
   * The runs of {@code q} as a bitmap instead, when the chunk's bound allows it (else they stay
   * runs, held against {@link #maxRuns}).
   */
  private void toBits(PerQueue q) {
    long lo = q.lo[0] >>> 6;
    long words = (q.hi[q.runs - 1] >>> 6) - lo + 1;
    if (wordsHeld + words > maxWords || words > Integer.MAX_VALUE - 8) {
      return;
    }
    long[] bits = new long[(int) words];
    long count = 0;
    for (int i = 0; i < q.runs; i++) {
      for (long id = q.lo[i]; id <= q.hi[i]; id++) {
        bits[(int) ((id >>> 6) - lo)] |= 1L << (id & 63);
      }
      count += q.count[i];
    }
    wordsHeld += words;
    runsHeld -= q.runs;
    q.bits = bits;
    q.bitsBase = lo << 6;
    q.bitsCount = count;
    q.runs = 0;
    q.lo = q.hi = q.count = null;
    q.ids = null;
  }

  /** Sorts the buffered ids of {@code q} and merges them into its runs. */
  private void merge(PerQueue q) {
    int n = q.buffered;
    q.buffered = 0;
    if (n == 0) {
      return;
    }
    long[] ids = q.ids;
    Arrays.sort(ids, 0, n);
    // The new runs (equal ids extend a run: a duplicate counts twice in it).
    long[] nlo = new long[n];
    long[] nhi = new long[n];
    long[] ncount = new long[n];
    int m = 0;
    for (int i = 0; i < n; i++) {
      long id = ids[i];
      if (m > 0 && id - 1 <= nhi[m - 1]) { // ids are >= 0: no overflow
        nhi[m - 1] = id;
        ncount[m - 1]++;
      } else {
        nlo[m] = id;
        nhi[m] = id;
        ncount[m] = 1;
        m++;
      }
    }
    // Merged with the runs held, both in order of lo: overlapping or adjacent runs join.
    int old = q.runs;
    long[] lo = new long[old + m];
    long[] hi = new long[old + m];
    long[] count = new long[old + m];
    int r = 0;
    int a = 0;
    int b = 0;
    while (a < old || b < m) {
      boolean takeOld = b >= m || (a < old && q.lo[a] <= nlo[b]);
      long l = takeOld ? q.lo[a] : nlo[b];
      long h = takeOld ? q.hi[a] : nhi[b];
      long c = takeOld ? q.count[a++] : ncount[b++];
      if (r > 0 && l - 1 <= hi[r - 1]) {
        hi[r - 1] = Math.max(hi[r - 1], h);
        count[r - 1] += c;
      } else {
        lo[r] = l;
        hi[r] = h;
        count[r] = c;
        r++;
      }
    }
    q.lo = lo;
    q.hi = hi;
    q.count = count;
    q.runs = r;
    runsHeld += r - old;
    if (r > BITS_AFTER_RUNS) {
      toBits(q);
    }
    if (runsHeld > maxRuns) {
      overflow = true;
      forgetRanges();
    }
  }

  /**
   * Ends the open group of {@code q}: its runs become range rows of the chunk; a bitmap's row
   * stands for LSNs up to {@code to} (see {@link Summary}).
   */
  private void closeGroup(PerQueue q, byte[] name, long to) {
    if (overflow || q.groupLsn == Long.MIN_VALUE) {
      return;
    }
    merge(q);
    if (overflow) {
      return;
    }
    if (q.bits != null) { // one row; its words stay held until the chunk's rows go
      ByteBuffer b = ByteBuffer.allocate(q.bits.length * 8).order(ByteOrder.LITTLE_ENDIAN);
      b.asLongBuffer().put(q.bits);
      long from = q.eventLsn == Long.MIN_VALUE ? chunkFirst : q.eventLsn + 1;
      rangeRows.add(new Object[] {name, q.groupLsn, null, 0L, null, null, null, q.bitsBase,
          q.bitsBase + 64L * q.bits.length - 1, q.groupLsn, q.bitsCount, b.array(), from, to});
      q.bits = null;
      q.bitsCount = 0;
      q.groupLsn = Long.MIN_VALUE;
      return;
    }
    for (int i = 0; i < q.runs; i++) {
      rangeRows.add(new Object[] {name, q.groupLsn, null, 0L, null, null, null, q.lo[i],
          q.hi[i], q.groupLsn, q.count[i]});
    }
    q.runs = 0;
    q.lo = q.hi = q.count = null;
    q.groupLsn = Long.MIN_VALUE;
  }

  /** Drops every run of the chunk (it overflowed); the removes are still counted. */
  private void forgetRanges() {
    rangeRows.clear();
    wordsHeld = 0;
    for (int s = 0; s < adds.slots(); s++) {
      PerQueue q = adds.key(s) == null ? null : (PerQueue) adds.data(s);
      if (q != null) {
        q.ids = q.lo = q.hi = q.count = q.bits = null;
        q.buffered = q.runs = 0;
        q.bitsCount = 0;
        q.groupLsn = Long.MIN_VALUE;
      }
    }
  }

  /**
   * The rows of the chunk just read (of {@code source} and {@code segment}), as one batch of the
   * columns Spark asked for; null when the chunk held no entry. Forgets the chunk.
   */
  ColumnarBatch finish(String source, String segment) {
    List<Object[]> rows = new ArrayList<>();
    for (Event e : events) {
      rows.add(new Object[] {e.queue, e.lsn, e.addsBefore, 0L, e.lsn,
          LogColumns.KIND_NAMES[e.kind], e.kind == 0 ? e.impl : null, null, null, null, null});
    }
    events.clear();
    for (int s = 0; s < adds.slots(); s++) {
      PerQueue q = adds.key(s) == null ? null : (PerQueue) adds.data(s);
      if (q != null && q.entries > 0) {
        rows.add(new Object[] {adds.key(s), q.last, q.adds, q.removes, null, null, null, null,
            null, null, null});
      }
      if (q != null && ranges) {
        closeGroup(q, adds.key(s), chunkLast);
      }
    }
    if (overflow) {
      // Beside the queue of the chunk's first row: the aggregate keeps it apart by rm_lsn.
      Object[] first = rows.get(0);
      rows.add(new Object[] {first[0], firstRemoveLsn, null, 0L, null, null, null, null, null,
          firstRemoveLsn, chunkRemoves});
    } else {
      rows.addAll(rangeRows);
    }
    rangeRows.clear();
    runsHeld = 0;
    wordsHeld = 0;
    overflow = false;
    firstRemoveLsn = Long.MIN_VALUE;
    chunkRemoves = 0;
    chunkFirst = chunkLast = Long.MIN_VALUE;
    for (int s = 0; s < adds.slots(); s++) {
      if (adds.key(s) != null && adds.data(s) != null) {
        adds.setData(s, null);
      }
    }
    if (rows.isEmpty()) {
      return null;
    }
    StructField[] fields = readSchema.fields();
    ColumnVector[] out = new ColumnVector[fields.length];
    for (int i = 0; i < fields.length; i++) {
      String name = fields[i].name();
      OnHeapColumnVector v = new OnHeapColumnVector(rows.size(), fields[i].dataType());
      for (Object[] r : rows) {
        Object value;
        if (name.equals("source")) {
          value = source;
        } else if (name.equals("segment")) {
          value = segment;
        } else {
          int at = indexOf(name) - 2;
          value = at < r.length ? r[at] : null; // rm_bits..rm_to: only a bitmap's row has them
        }
        append(v, value);
      }
      out[i] = v;
    }
    ColumnarBatch batch = new ColumnarBatch(out);
    batch.setNumRows(rows.size());
    return batch;
  }

  private static int indexOf(String name) {
    for (int i = 0; i < NAMES.length; i++) {
      if (NAMES[i].equals(name)) {
        return i;
      }
    }
    throw new IllegalArgumentException("tflux: unknown summary column " + name);
  }

  private static void append(OnHeapColumnVector v, Object value) {
    if (value == null) {
      v.appendNull();
    } else if (value instanceof Long) {
      v.appendLong((Long) value);
    } else if (value instanceof Integer) {
      v.appendInt((Integer) value);
    } else if (value instanceof byte[]) {
      byte[] b = (byte[]) value;
      v.appendByteArray(b, 0, b.length);
    } else {
      byte[] b = UTF8String.fromString((String) value).getBytes();
      v.appendByteArray(b, 0, b.length);
    }
  }
}
