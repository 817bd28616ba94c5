package io.tflux.spark;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.Dictionary;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The columns of the {@code tflux} format (the same names, types and order as the Python
 * source's {@code _columns.log_schema}) and the delta decoder that fills them (spec 6; the
 * JVM twin of the core's {@code format/delta.rs} and {@code log/columns/delta.rs}). Only the columns Spark
 * asks for are filled, but every delta in the LSN range is decoded and checked, so a pruned
 * scan fails where a full one does.
 */
final class LogColumns {
  static final String[] NAMES = {"source", "segment", "lsn", "term", "kind", "queue", "key",
      "record_id", "message", "implementation", "max_queue_size", "max_message_size", "key_min",
      "key_max", "due", "kept_ids", "rules", "data", "queue_adds", "inc", "replay_id",
      "replay_key"};
  static final DataType[] TYPES = {DataTypes.StringType, DataTypes.StringType,
      DataTypes.LongType, DataTypes.IntegerType, DataTypes.StringType, DataTypes.StringType,
      DataTypes.LongType, DataTypes.LongType, DataTypes.BinaryType, DataTypes.IntegerType,
      DataTypes.IntegerType, DataTypes.IntegerType, DataTypes.LongType, DataTypes.LongType,
      DataTypes.LongType, DataTypes.createArrayType(DataTypes.LongType), DataTypes.StringType,
      DataTypes.BinaryType, DataTypes.LongType, DataTypes.LongType, DataTypes.LongType,
      DataTypes.LongType};
  static final int SOURCE = 0, SEGMENT = 1, LSN = 2, TERM = 3, KIND = 4, QUEUE = 5, KEY = 6,
      RECORD_ID = 7, MESSAGE = 8, IMPLEMENTATION = 9, MAX_QUEUE_SIZE = 10,
      MAX_MESSAGE_SIZE = 11, KEY_MIN = 12, KEY_MAX = 13, DUE = 14, KEPT_IDS = 15, RULES = 16,
      DATA = 17, QUEUE_ADDS = 18, INC = 19, REPLAY_ID = 20, REPLAY_KEY = 21;
  /** TaskFlux's four kinds (0..3), then the task-queue kinds of spec section 12 (4..8). */
  static final String[] KIND_NAMES = {"create_queue", "delete_queue", "add_record",
      "remove_record", "queue_rules", "add_later", "delivered", "failed", "purge"};
  static final String[] DELTA_NAMES = {"CreateQueue", "DeleteQueue", "AddRecord",
      "RemoveRecord", "QueueRules", "AddLater", "Delivered", "Failed", "Purge"};
  /** The columns only the task-queue deltas fill, as {@link #b} bits. */
  static final int TASK_COLUMNS = (1 << DUE) | (1 << KEPT_IDS) | (1 << RULES);

  /**
   * The schema for the {@code rawData}, {@code columns} and {@code addCounts} options (Python's,
   * exactly). {@code addCounts} appends {@code queue_adds}: the AddRecords of the entry's queue
   * in its segment file, from the scan's first LSN up to and including the entry (what replay
   * derives record ids from). {@code replayPlan} (see {@link ReplayIds}) appends {@code inc} and
   * {@code replay_id} and {@code replay_key}: an AddRecord's or RemoveRecord's incarnation
   * number, the id replay gives an AddRecord (a RemoveRecord's own record id), and (incarnation,
   * id) as one long; null for other entries.
   */
  static StructType schema(Map<String, String> options) {
    if (Options.flag(options, "summary", false)) {
      return Summary.schema();
    }
    boolean raw = Options.flag(options, "rawData", false);
    int n = raw ? DATA + 1 : DATA;
    List<String> names = Options.columns(options, NAMES, n);
    List<StructField> fields = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      if (names == null || names.contains(NAMES[i])) {
        fields.add(DataTypes.createStructField(NAMES[i], TYPES[i], true));
      }
    }
    if (Options.flag(options, "addCounts", false)) {
      fields.add(DataTypes.createStructField(NAMES[QUEUE_ADDS], TYPES[QUEUE_ADDS], true));
    }
    if (Options.get(options, "replayPlan") != null) {
      fields.add(DataTypes.createStructField(NAMES[INC], TYPES[INC], true));
      fields.add(DataTypes.createStructField(NAMES[REPLAY_ID], TYPES[REPLAY_ID], true));
      fields.add(DataTypes.createStructField(NAMES[REPLAY_KEY], TYPES[REPLAY_KEY], true));
    }
    return DataTypes.createStructType(fields);
  }

  /** The kind strings as a Parquet-style dictionary (ids: indexes into KIND_NAMES). */
  static final class KindDictionary implements Dictionary {
    static final byte[][] BYTES = new byte[KIND_NAMES.length][];

    static {
      for (int i = 0; i < KIND_NAMES.length; i++) {
        BYTES[i] = KIND_NAMES[i].getBytes(StandardCharsets.US_ASCII);
      }
    }

    @Override
    public int decodeToInt(int id) {
      throw new UnsupportedOperationException();
    }

    @Override
    public long decodeToLong(int id) {
      throw new UnsupportedOperationException();
    }

    @Override
    public float decodeToFloat(int id) {
      throw new UnsupportedOperationException();
    }

    @Override
    public double decodeToDouble(int id) {
      throw new UnsupportedOperationException();
    }

    @Override
    public byte[] decodeToBinary(int id) {
      return BYTES[id];
    }
  }

  final int capacity;
  final ColumnVector[] out;
  /** Per column id (see NAMES): the vector to fill, or null when Spark did not ask for it. */
  final WritableColumnVector[] vec = new WritableColumnVector[NAMES.length];
  /** The queue name of the row being filled (a QueueName is at most 255 bytes, spec 2). */
  private final byte[] name = new byte[255];
  final ConstantColumnVector source;
  final ConstantColumnVector segment;
  /** {@code message} and {@code data}: slices of the segment, not copies (or null). */
  final SliceVector message;
  final SliceVector data;
  WritableColumnVector kindIds;
  final ColumnarBatch batch;
  private final Cursor c = new Cursor(null, 0, 0, 0);
  /** The records are a channel's messages (spec 10): only {@code data}, nothing decoded. */
  boolean messages;
  /**
   * The running AddRecord counts of {@code queue_adds} (also kept for {@code inc} and {@code
   * replay_id}), or null when no column needs them.
   */
  final QueueAdds adds;
  /** The {@code summary} option's per-chunk rows, or null (see {@link Summary}). */
  Summary summary;
  /** Replay's tables for {@code inc} and {@code replay_id}, or null. */
  private final ReplayIds replay;
  /** The queues of the current file's source in {@link #replay}, and the file's name. */
  private Map<String, ReplayIds.Queue> replayQueues;
  private String segmentName;
  /** The columns Spark asked for that are filled per row, as {@link #b} bits. */
  private final int present;
  /** Whether any column needs the delta's fields (else only its structure is checked). */
  private final boolean fields;
  /**
   * No column is filled per row but {@code queue_adds} (replay's scans): then {@link #add} takes
   * the common deltas by {@link Cursor#fastDelta} without the field by field decoder.
   */
  private final boolean lean;
  /** The filters this scan applies itself (rows they drop are not returned), or null. */
  private final RowFilter only;
  /**
   * Whether the last lookup in {@link #adds} was for the last name {@link #c} checked: then a
   * record whose name the cursor found repeated is counted without comparing the name again.
   */
  private boolean addsInSync;

  LogColumns(StructType readSchema, int capacity) {
    this(readSchema, capacity, null);
  }

  LogColumns(StructType readSchema, int capacity, ReplayIds replay) {
    this(readSchema, capacity, replay, null);
  }

  /** {@code only}: the filters this scan applies itself ({@link RowFilter}), or null. */
  LogColumns(StructType readSchema, int capacity, ReplayIds replay, RowFilter only) {
    this.capacity = capacity;
    this.only = only;
    out = new ColumnVector[readSchema.fields().length];
    ConstantColumnVector src = null;
    ConstantColumnVector seg = null;
    SliceVector msg = null;
    SliceVector raw = null;
    boolean needFields = false;
    for (int i = 0; i < out.length; i++) {
      String name = readSchema.fields()[i].name();
      int id = indexOf(name);
      if (id == SOURCE || id == SEGMENT) {
        ConstantColumnVector cv = new ConstantColumnVector(capacity, DataTypes.StringType);
        out[i] = cv;
        if (id == SOURCE) {
          src = cv;
        } else {
          seg = cv;
        }
        continue;
      }
      if (id == MESSAGE || id == DATA) {
        SliceVector sv = new SliceVector(capacity);
        out[i] = sv;
        if (id == MESSAGE) {
          msg = sv;
        } else {
          raw = sv;
        }
        needFields = true;
        continue;
      }
      OnHeapColumnVector v = new OnHeapColumnVector(capacity, TYPES[id]);
      vec[id] = v;
      out[i] = v;
      needFields |= id >= KIND && id < QUEUE_ADDS;
    }
    source = src;
    segment = seg;
    message = msg;
    data = raw;
    int bits = (msg != null ? b(MESSAGE) : 0) | (raw != null ? b(DATA) : 0);
    for (int id = 0; id < vec.length; id++) {
      bits |= vec[id] != null ? b(id) : 0;
    }
    present = bits;
    boolean ids = vec[INC] != null || vec[REPLAY_ID] != null || vec[REPLAY_KEY] != null;
    if (ids && replay == null) {
      throw new IllegalArgumentException(
          "tflux: inc, replay_id and replay_key need the replayPlan option");
    }
    // Removed ranges drop rows whichever columns Spark asked for, and so does an inc filter.
    ids |= replay != null && (replay.hasRanges || (only != null && only.incs != null));
    this.replay = ids ? replay : null;
    adds = vec[QUEUE_ADDS] == null && !ids ? null : new QueueAdds();
    fields = needFields;
    lean = (present & ~b(QUEUE_ADDS)) == 0;
    if (vec[KIND] != null) {
      vec[KIND].setDictionary(new KindDictionary());
    }
    batch = new ColumnarBatch(out);
  }

  static int indexOf(String name) {
    for (int i = 0; i < NAMES.length; i++) {
      if (NAMES[i].equals(name)) {
        return i;
      }
    }
    throw new IllegalArgumentException("tflux: unknown column " + name);
  }

  /** The constant columns of the rows that follow (one segment per batch). */
  void setFile(String sourceName, String segmentName) {
    if (source != null) {
      source.setUtf8String(UTF8String.fromString(sourceName));
    }
    if (segment != null) {
      segment.setUtf8String(UTF8String.fromString(segmentName));
    }
    this.segmentName = segmentName;
    addsInSync = false; // the reader counted the records before a split without the cursor
    if (replay != null) {
      replayQueues = replay.source(sourceName);
    }
  }

  /** Clears the vectors for the next batch, whose records all lie in {@code segment}. */
  void reset(ByteBuffer segment) {
    if (message != null) {
      message.reset(segment);
    }
    if (data != null) {
      data.reset(segment);
    }
    for (WritableColumnVector v : vec) {
      if (v != null) {
        v.reset();
      }
    }
    if (vec[KIND] != null) {
      kindIds = vec[KIND].reserveDictionaryIds(capacity);
    }
  }

  ColumnarBatch finish(int rows) {
    batch.setNumRows(rows);
    return batch;
  }

  /**
   * Decodes the delta in {@code buf[at, at + len)} (the record data at file offset {@code
   * dataOffset} of {@code path}) into row {@code row}. A delta that does not follow the spec is
   * a {@link CorruptException} naming the file and the offset of the bad field. Returns false
   * when the row is not returned: an AddRecord the {@code replayPlan}'s removed ranges drop
   * ({@link ReplayIds.Queue#removed}); the next record then fills the same row.
   */
  boolean add(int row, long lsn, int term, ByteBuffer buf, int at, int len, String path,
      long dataOffset) {
    if (lean && !messages) {
      // Small enough to inline into the reader's loop, unlike the decoder below (issue 45).
      int fast = c.reset(buf, at, at + len, 0).fastDelta();
      if (fast != 0) { // one name: its own
        boolean same = addsInSync && c.repeated;
        return fast == 'A' ? counted(row, 2, lsn, 0, 0, buf, at + 2, c.lastLen, true, same)
            : counted(row, 3, lsn, int64(c.fastLong, lsn), 0, buf, at + 2, c.lastLen, true,
                same);
      }
    }
    return decode(row, lsn, term, buf, at, len, path, dataOffset);
  }

  /** {@link #add}, every delta field by field. */
  private boolean decode(int row, long lsn, int term, ByteBuffer buf, int at, int len,
      String path, long dataOffset) {
    WritableColumnVector[] v = vec;
    if (v[LSN] != null) {
      v[LSN].putLong(row, lsn);
    }
    if (v[TERM] != null) {
      v[TERM].putInt(row, term);
    }
    if (data != null) {
      data.put(row, buf, at, len);
    }
    if (messages) {
      if (only != null && !only.kind(-1)) {
        return false;
      }
      nulls(row, b(KIND) | b(QUEUE) | b(KEY) | b(RECORD_ID) | b(MESSAGE) | b(IMPLEMENTATION)
          | b(MAX_QUEUE_SIZE) | b(MAX_MESSAGE_SIZE) | b(KEY_MIN) | b(KEY_MAX) | TASK_COLUMNS
          | b(QUEUE_ADDS) | b(INC) | b(REPLAY_ID) | b(REPLAY_KEY));
      return true;
    }
    c.reset(buf, at, at + len, 0);
    int names = c.namesRead;
    int kind = -1;
    // The delta's fields, decoded before any is written: a dropped row writes no null.
    int impl = 0;
    int maxQ = 0;
    int maxM = 0;
    boolean range = false;
    long min = 0;
    long max = 0;
    long key = 0;
    int msgAt = 0;
    int msgLen = 0;
    long removed = 0;
    long due = 0;
    int keptAt = 0;
    int keptLen = 0;
    String rules = null;
    try {
      int nameAt;
      int nameLen;
      int fast = c.fastDelta();
      if (fast == 'A') {
        kind = 2;
        nameAt = at + 2;
        nameLen = c.lastLen;
        key = c.fastLong;
        msgAt = c.fastAt;
        msgLen = c.fastLen;
      } else if (fast == 'R') {
        kind = 3;
        nameAt = at + 2;
        nameLen = c.lastLen;
        removed = int64(c.fastLong, lsn);
      } else {
        int marker = c.u8("delta marker");
        switch (marker) {
          case 'C': {
            kind = 0;
            nameAt = c.queueName();
            nameLen = c.lastLen;
            impl = c.i32("implementation");
            maxQ = c.i32("max queue size");
            maxM = c.i32("max message size");
            range = c.bool("key range flag");
            min = range ? c.i64("key range min") : 0;
            max = range ? c.i64("key range max") : 0;
            end(kind);
            break;
          }
          case 'D': {
            kind = 1;
            nameAt = c.queueName();
            nameLen = c.lastLen;
            end(kind);
            break;
          }
          case 'A': {
            kind = 2;
            nameAt = c.queueName();
            nameLen = c.lastLen;
            key = c.i64("key");
            msgAt = c.buffer("message length");
            msgLen = c.lastLen;
            end(kind);
            break;
          }
          case 'R': {
            kind = 3;
            nameAt = c.queueName();
            nameLen = c.lastLen;
            long id = c.i64("record id");
            end(kind);
            removed = int64(id, lsn);
            break;
          }
          case 'Q': {
            kind = 4;
            nameAt = c.queueName();
            nameLen = c.lastLen;
            rules = rulesJson();
            end(kind);
            break;
          }
          case 'L': {
            kind = 5;
            nameAt = c.queueName();
            nameLen = c.lastLen;
            key = c.i64("key");
            due = c.i64("not before");
            msgAt = c.buffer("message length");
            msgLen = c.lastLen;
            end(kind);
            break;
          }
          case 'V':
          case 'F': {
            kind = marker == 'V' ? 6 : 7;
            nameAt = c.queueName();
            nameLen = c.lastLen;
            long id = c.i64("record id");
            due = kind == 7 ? c.i64("due") : 0;
            end(kind);
            removed = int64(id, lsn);
            break;
          }
          case 'P': {
            kind = 8;
            nameAt = c.queueName();
            nameLen = c.lastLen;
            keptLen = c.len("kept id count", 8);
            keptAt = c.take(keptLen * 8, "kept ids");
            end(kind);
            for (int i = 0; i < keptLen; i++) {
              int64(buf.getLong(keptAt + 8 * i), lsn);
            }
            break;
          }
          default:
            throw c.fail(0, "unknown delta marker " + Cursor.hex2(marker));
        }
      }
      // Its own name the only one the delta held (a QueueRules' dead letter queue is another),
      // and the one of the lookup before.
      boolean own = c.namesRead == names + 1;
      boolean same = addsInSync && own && c.repeated;
      if (!counted(row, kind, lsn, removed, impl, buf, nameAt, nameLen, own, same)) {
        return false;
      }
      if (fields) {
        switch (kind) {
          case 0:
            nulls(row, b(KEY) | b(RECORD_ID) | b(MESSAGE));
            putInt(row, IMPLEMENTATION, impl);
            putInt(row, MAX_QUEUE_SIZE, maxQ);
            putInt(row, MAX_MESSAGE_SIZE, maxM);
            if (range) {
              putLong(row, KEY_MIN, min);
              putLong(row, KEY_MAX, max);
            } else {
              nulls(row, b(KEY_MIN) | b(KEY_MAX));
            }
            break;
          case 1:
            nulls(row, b(KEY) | b(RECORD_ID) | b(MESSAGE));
            nulls(row, b(IMPLEMENTATION) | b(MAX_QUEUE_SIZE) | b(MAX_MESSAGE_SIZE));
            nulls(row, b(KEY_MIN) | b(KEY_MAX));
            break;
          case 2:
          case 5:
            putLong(row, KEY, key);
            nulls(row, b(RECORD_ID));
            if (message != null) {
              message.put(row, buf, msgAt, msgLen);
            }
            nulls(row, b(IMPLEMENTATION) | b(MAX_QUEUE_SIZE) | b(MAX_MESSAGE_SIZE));
            nulls(row, b(KEY_MIN) | b(KEY_MAX));
            break;
          case 4:
          case 8:
            nulls(row, b(KEY) | b(RECORD_ID) | b(MESSAGE));
            nulls(row, b(IMPLEMENTATION) | b(MAX_QUEUE_SIZE) | b(MAX_MESSAGE_SIZE));
            nulls(row, b(KEY_MIN) | b(KEY_MAX));
            break;
          default:
            nulls(row, b(KEY) | b(MESSAGE));
            putLong(row, RECORD_ID, removed);
            nulls(row, b(IMPLEMENTATION) | b(MAX_QUEUE_SIZE) | b(MAX_MESSAGE_SIZE));
            nulls(row, b(KEY_MIN) | b(KEY_MAX));
            break;
        }
        // The task-queue columns (spec section 12): due, kept_ids, rules.
        if (kind == 5 || kind == 7) {
          putLong(row, DUE, due);
        } else {
          nulls(row, b(DUE));
        }
        if (kind == 8 && vec[KEPT_IDS] != null) {
          WritableColumnVector items = vec[KEPT_IDS].arrayData();
          int first = items.getElementsAppended();
          for (int i = 0; i < keptLen; i++) {
            items.appendLong(buf.getLong(keptAt + 8 * i));
          }
          vec[KEPT_IDS].putArray(row, first, keptLen);
        } else {
          nulls(row, b(KEPT_IDS));
        }
        if (rules != null && vec[RULES] != null) {
          byte[] text = rules.getBytes(StandardCharsets.US_ASCII);
          vec[RULES].putByteArray(row, text, 0, text.length);
        } else {
          nulls(row, b(RULES));
        }
        if (kindIds != null) {
          kindIds.putInt(row, kind);
        }
        if (v[QUEUE] != null) {
          // Through a scratch array: Spark 4.0 has no putByteArray(int, ByteBuffer, int, int)
          // (a name is at most 255 bytes; the copy costs nothing measurable).
          buf.get(nameAt, name, 0, nameLen);
          v[QUEUE].putByteArray(row, name, 0, nameLen);
        }
      }
    } catch (Cursor.DecodeError e) {
      throw new CorruptException(path, dataOffset + e.offset,
          "undecodable delta at LSN " + lsn + ": " + e.display());
    }
    return true;
  }

  /**
   * What follows the decoding of a delta of kind {@code kind} (its queue name at {@code nameAt},
   * {@code own}: the only name it held, {@code same}: and the one of the lookup before): the
   * filters, the {@code queue_adds} count, the replay columns and the {@code summary} option's
   * entry. False when the row is not returned (see {@link #add}).
   */
  private boolean counted(int row, int kind, long lsn, long removed, int impl, ByteBuffer buf,
      int nameAt, int nameLen, boolean own, boolean same) {
    if (only != null && !only.kind(kind)) {
      // Not returned, but decoded and checked above, and an AddRecord counted all the same.
      if (kind == 2 && adds != null) {
        adds.add(buf, nameAt, nameLen, same);
        addsInSync = own;
      } else {
        addsInSync = same;
      }
      return false;
    }
    if (adds != null) {
      long count = kind == 2 ? adds.add(buf, nameAt, nameLen, same)
          : adds.get(buf, nameAt, nameLen, same);
      addsInSync = own;
      if (replay != null && !replayIds(row, kind, lsn, count, removed, buf, nameAt, nameLen)) {
        return false;
      }
      if (vec[QUEUE_ADDS] != null) {
        vec[QUEUE_ADDS].putLong(row, count);
      }
      if (summary != null) {
        summary.entry(kind, lsn, count, impl, removed, buf, nameAt, nameLen);
      }
    }
    return true;
  }

  /**
   * {@code inc}, {@code replay_id} and {@code replay_key} of row {@code row} (see {@link
   * ReplayIds}); false, writing nothing, for an AddRecord in a removed range of its incarnation.
   */
  /**
   * The incarnation {@link #replayIds} found last: its queue and index, the LSNs {@code
   * [foundFrom, foundTo)} for which {@link ReplayIds.Queue#find} gives it (its interval, up to the
   * next one's start), and whether the {@code inc} filter returns its rows.
   */
  private ReplayIds.Queue foundQueue;
  private int foundAt;
  private long foundFrom;
  private long foundTo;
  private boolean foundTaken;

  private boolean replayIds(int row, int kind, long lsn, long count, long removed,
      ByteBuffer buf, int nameAt, int nameLen) {
    ReplayIds.Queue q = null;
    int at = -1;
    ReplayIds.Resolved r = null;
    if (kind == 2 || kind == 3) {
      int slot = adds.lastSlot();
      r = (ReplayIds.Resolved) adds.data(slot);
      if (r == null) {
        r = ReplayIds.resolve(replayQueues, segmentName, buf, nameAt, nameLen);
        adds.setData(slot, r);
      }
      q = r.queue;
      if (q != null && q == foundQueue && lsn >= foundFrom && lsn < foundTo) {
        at = foundAt; // consecutive entries of a queue mostly lie in one incarnation
      } else {
        at = q == null ? -1 : q.find(lsn);
        if (at >= 0) {
          foundQueue = q;
          foundAt = at;
          foundFrom = q.start[at];
          foundTo = at + 1 < q.start.length ? Math.min(q.end[at], q.start[at + 1]) : q.end[at];
          foundTaken = only == null || only.incs == null || only.inc(q.inc[at]);
        }
      }
    }
    if (only != null && only.incs != null && (at < 0 || !foundTaken)) {
      return false; // its inc is null or not one asked for
    }
    if (at < 0 || (kind == 2 && !r.hasSegBase)) {
      if (at < 0) {
        nulls(row, b(INC));
      } else {
        putLong(row, INC, q.inc[at]);
      }
      nulls(row, b(REPLAY_ID) | b(REPLAY_KEY));
      return true;
    }
    long id = kind == 3 ? removed : q.baseId[at] + r.segBase + count - q.addsBefore[at];
    if (kind == 2 && q.removed(at, id)) {
      return false;
    }
    putLong(row, INC, q.inc[at]);
    putLong(row, REPLAY_ID, id);
    long key = q.key(at, id);
    if (key < 0) {
      nulls(row, b(REPLAY_KEY));
    } else {
      putLong(row, REPLAY_KEY, key);
    }
    return true;
  }

  /** A record id as Int64 (Spark has no unsigned type): past it, refused naming the LSN. */
  private static long int64(long id, long lsn) {
    if (id < 0) {
      throw new IllegalArgumentException("tflux: record id " + Long.toUnsignedString(id)
          + " at LSN " + lsn + " exceeds Int64");
    }
    return id;
  }

  /**
   * A QueueRules' change (format/rules.rs) as the core's {@code rules} column writes it
   * ({@code log/columns/task.rs} {@code rules_json}): one JSON object in spec order, a rule
   * left as it is absent, a cleared one null.
   */
  private String rulesJson() throws Cursor.DecodeError {
    StringBuilder out = new StringBuilder("{");
    if (c.bool("dead letter change flag")) {
      out.append("\"dead_letter\":");
      if (c.bool("dead letter flag")) {
        int at = c.queueName();
        int len = c.lastLen;
        out.append("[\"");
        for (int i = 0; i < len; i++) {
          char ch = (char) (c.buf.get(at + i) & 0xFF);
          if (ch == '"' || ch == '\\') {
            out.append('\\');
          }
          out.append(ch);
        }
        out.append("\",").append(c.i32("dead letter deliveries")).append(']');
      } else {
        out.append("null");
      }
    }
    String[][] ints = {{"retry_delay_ms", "retry delay"}, {"retry_backoff", "retry backoff"},
        {"retry_max_delay_ms", "retry max delay"}, {"lease_ms", "lease"}};
    for (String[] f : ints) {
      if (c.bool(f[1] + " change flag")) {
        out.append(out.length() > 1 ? "," : "").append('"').append(f[0]).append("\":");
        out.append(c.bool(f[1] + " flag") ? String.valueOf(c.i64(f[1])) : "null");
      }
    }
    return out.append('}').toString();
  }

  private void end(int kind) throws Cursor.DecodeError {
    if (c.left() != 0) {
      throw c.fail(c.pos(), c.left() + " trailing bytes after " + DELTA_NAMES[kind]);
    }
  }

  private void putInt(int row, int col, int value) {
    if (vec[col] != null) {
      vec[col].putInt(row, value);
    }
  }

  private void putLong(int row, int col, long value) {
    if (vec[col] != null) {
      vec[col].putLong(row, value);
    }
  }

  /** One column id as a bit of a mask for {@link #nulls}. */
  private static int b(int col) {
    return 1 << col;
  }

  /** Nulls in row {@code row} of the columns of {@code mask} ({@link #b} bits) Spark asked for. */
  private void nulls(int row, int mask) {
    int m = mask & present;
    while (m != 0) {
      int col = Integer.numberOfTrailingZeros(m);
      m &= m - 1;
      if (col == MESSAGE) {
        message.putNull(row);
      } else if (col == DATA) {
        data.putNull(row);
      } else {
        vec[col].putNull(row);
      }
    }
  }
}
