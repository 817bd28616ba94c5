package io.tflux.spark;

import java.nio.ByteBuffer;
import java.util.ArrayList;
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
 */
final class Summary {
  static final String[] NAMES = {"source", "segment", "queue", "last", "adds", "removes",
      "ev_lsn", "ev_kind", "ev_impl"};
  static final DataType[] TYPES = {DataTypes.StringType, DataTypes.StringType,
      DataTypes.StringType, DataTypes.LongType, DataTypes.LongType, DataTypes.LongType,
      DataTypes.LongType, DataTypes.StringType, DataTypes.IntegerType};

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

  Summary(QueueAdds adds, StructType readSchema) {
    this.adds = adds;
    this.readSchema = readSchema;
  }

  /** One entry of the chunk (after {@link QueueAdds} counted it; its slot is the last one). */
  void entry(int kind, long lsn, long count, int impl, ByteBuffer buf, int nameAt, int nameLen) {
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
      }
    } else {
      byte[] name = new byte[nameLen];
      buf.get(nameAt, name, 0, nameLen);
      events.add(new Event(name, lsn, kind, impl, count));
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
          LogColumns.KIND_NAMES[e.kind], e.kind == 0 ? e.impl : null});
    }
    events.clear();
    for (int s = 0; s < adds.slots(); s++) {
      PerQueue q = adds.key(s) == null ? null : (PerQueue) adds.data(s);
      if (q != null && q.entries > 0) {
        rows.add(new Object[] {adds.key(s), q.last, q.adds, q.removes, null, null, null});
      }
      if (q != null) {
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
          value = r[indexOf(name) - 2];
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
