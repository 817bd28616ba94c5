package io.tflux.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * {@code spark.read.format("tflux_snapshot")} on the JVM: one row per record of each source's
 * snapshot, the same columns and rows as the Python source ({@code snapshot_source.py}). With
 * replay's {@code replayPlan} option (see {@link ReplayIds}), a record removed in its queue's
 * first incarnation (the one holding the snapshot, before every log entry) is not returned.
 */
public final class SnapshotSource implements TableProvider, DataSourceRegister {
  /**
   * The columns; the last two ({@code due}: unix ms of a delayed record, else null;
   * {@code attempts}: its counted deliveries, else 0) only with the {@code tasks} option, from
   * a task-layout snapshot's tasks (spec 12), for replay's task path.
   */
  static final String[] NAMES = {"source", "queue", "implementation", "record_id", "key",
      "message", "last_index", "last_term", "due", "attempts"};
  static final DataType[] TYPES = {DataTypes.StringType, DataTypes.StringType,
      DataTypes.IntegerType, DataTypes.LongType, DataTypes.LongType, DataTypes.BinaryType,
      DataTypes.LongType, DataTypes.LongType, DataTypes.LongType, DataTypes.IntegerType};
  /** Columns without the {@code tasks} option. */
  static final int PLAIN = 8;

  @Override
  public String shortName() {
    return "tflux_snapshot";
  }

  /**
   * What the replay's driver needs of a snapshot, decoded and checked by this reader (and kept
   * for its tasks in this JVM, {@link Snapshot#cached}): null for an empty file, else a first
   * line {@code lastIndex records} (followed by {@code nameHex} of the first queue with
   * task-queue state when the snapshot has the task layout, spec 12) and one line
   * {@code implementation lastId nameHex} per queue.
   */
  public static String describe(String path) throws IOException {
    Snapshot snap = Snapshot.cached(path);
    if (snap == null) {
      return null;
    }
    long records = 0;
    StringBuilder queues = new StringBuilder();
    for (Snapshot.Queue q : snap.queues) {
      records += q.ids.length;
      queues.append('\n').append(q.implementation).append(' ')
          .append(Long.toUnsignedString(q.lastId)).append(' ');
      for (byte b : q.name) {
        queues.append(String.format("%02x", b & 0xFF));
      }
    }
    String tasks = "";
    for (Snapshot.Queue q : snap.queues) {
      if (q.tasks != null && tasks.isEmpty()) {
        StringBuilder name = new StringBuilder(" ");
        for (byte b : q.name) {
          name.append(String.format("%02x", b & 0xFF));
        }
        tasks = name.toString();
      }
    }
    return snap.lastIndex + " " + records + tasks + queues;
  }

  /**
   * The rules of each queue of a task-layout snapshot with task state, one line
   * {@code nameHex rulesJson} each (every rule named, null: none); "" for other snapshots,
   * null for an empty file.
   */
  public static String rules(String path) throws IOException {
    Snapshot snap = Snapshot.cached(path);
    if (snap == null) {
      return null;
    }
    StringBuilder out = new StringBuilder();
    for (Snapshot.Queue q : snap.queues) {
      if (q.tasks != null) {
        for (byte b : q.name) {
          out.append(String.format("%02x", b & 0xFF));
        }
        out.append(' ').append(q.tasks.rulesJson()).append('\n');
      }
    }
    return out.toString();
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    List<StructField> fields = new ArrayList<>();
    int columns = Options.flag(options, "tasks", false) ? NAMES.length : PLAIN;
    for (int i = 0; i < columns; i++) {
      fields.add(DataTypes.createStructField(NAMES[i], TYPES[i], true));
    }
    return DataTypes.createStructType(fields);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    return new SnapshotTable(schema);
  }

  static final class SnapshotTable implements Table, SupportsRead {
    final StructType schema;

    SnapshotTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return "tflux_snapshot";
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new Builder(schema, options);
    }
  }

  static final class Builder implements ScanBuilder, SupportsPushDownRequiredColumns, Scan,
      Batch {
    StructType schema;
    final CaseInsensitiveStringMap options;

    Builder(StructType schema, CaseInsensitiveStringMap options) {
      this.schema = schema;
      this.options = options;
    }

    @Override
    public void pruneColumns(StructType required) {
      schema = required;
    }

    @Override
    public Scan build() {
      return this;
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    /**
     * One partition per byte range of each snapshot (Spark's file split rule, as the log's):
     * every task decodes and checks the whole file (shared within a JVM, {@link
     * Snapshot#cached}) and returns the records whose data starts in its range, so the rows
     * of a big snapshot spread over the cores.
     */
    @Override
    public InputPartition[] planInputPartitions() {
      List<InputPartition> parts = new ArrayList<>();
      Map<String, String> hosts = Planner.locations(options);
      List<Sources.Source> sources = Sources.resolve(options);
      long total = 0;
      int files = 0;
      for (Sources.Source s : sources) {
        if (s.snapshot != null && !s.remote) {
          total += Planner.size(s.snapshot);
          files++;
        }
      }
      long split = Planner.splitBytes(options, total, files);
      for (Sources.Source s : sources) {
        if (s.snapshot != null) {
          String host = hosts.get(s.base);
          String[] prefer = host == null ? new String[0] : new String[] {host};
          long size = s.remote ? 0 : Planner.size(s.snapshot);
          long at = 0;
          while (size - at > split + split / 4) {
            parts.add(new Part(s.base, s.snapshot, s.remote, prefer, at, at + split));
            at += split;
          }
          parts.add(new Part(s.base, s.snapshot, s.remote, prefer, at, Long.MAX_VALUE));
        }
      }
      return parts.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      String plan = Options.get(options, "replayPlan");
      return new Factory(schema, plan == null ? null : ReplayIds.parse(plan));
    }
  }

  static final class Part implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String source;
    final String path;
    final boolean remote;
    final String[] hosts;
    /** The records whose data starts at a file offset in {@code [lo, hi)}. */
    final long lo;
    final long hi;

    Part(String source, String path, boolean remote, String[] hosts, long lo, long hi) {
      this.source = source;
      this.path = path;
      this.remote = remote;
      this.hosts = hosts;
      this.lo = lo;
      this.hi = hi;
    }

    @Override
    public String[] preferredLocations() {
      return hosts;
    }
  }

  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    final StructType schema;
    final ReplayIds replay;

    Factory(StructType schema, ReplayIds replay) {
      this.schema = schema;
      this.replay = replay;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("tflux reads columnar batches only");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new Reader((Part) partition, schema, replay);
    }
  }

  static final class Reader implements PartitionReader<ColumnarBatch> {
    static final int ROWS = 4096;
    final Part part;
    final int[] ids;
    final ColumnVector[] out;
    final ColumnarBatch batch;
    Snapshot snap;
    List<Snapshot.Queue> queues;
    int q;
    int r;
    /** Replay's plan (or null), and for queue {@link #planned} its queue there and incarnation. */
    final ReplayIds replay;
    int planned = -1;
    /** A message's bytes on their way into its vector (grown to the longest one). */
    private byte[] scratch = new byte[256];
    ReplayIds.Queue plannedQueue;
    int plannedAt = -1;

    Reader(Part part, StructType schema, ReplayIds replay) {
      this.part = part;
      this.replay = replay;
      StructField[] fields = schema.fields();
      ids = new int[fields.length];
      out = new ColumnVector[fields.length];
      for (int i = 0; i < fields.length; i++) {
        int id = java.util.Arrays.asList(NAMES).indexOf(fields[i].name());
        ids[i] = id;
        boolean constant = id == 0 || id == 6 || id == 7;
        out[i] = constant ? new ConstantColumnVector(ROWS, TYPES[id])
            : new OnHeapColumnVector(ROWS, TYPES[id]);
      }
      batch = new ColumnarBatch(out);
    }

    /**
     * The message at {@code snap.buf[at, at + len)} in {@link #scratch}: Spark 4.0's vectors
     * take a {@code byte[]} only (its {@code putByteArray(int, ByteBuffer, int, int)} came
     * later), and the snapshot is mapped, so it has no array to hand over.
     */
    private byte[] message(int at, int len) {
      if (scratch.length < len) {
        scratch = new byte[Math.max(len, scratch.length * 2)];
      }
      snap.buf.get(at, scratch, 0, len);
      return scratch;
    }

    @Override
    public boolean next() {
      if (snap == null) {
        if (part.remote) {
          Sources.checkHere(new Sources.Source(part.source, null, part.path, true, null));
          if (!java.nio.file.Files.exists(java.nio.file.Paths.get(part.path))) {
            return false; // that node has no snapshot
          }
        }
        try {
          snap = Snapshot.cached(part.path);
        } catch (IOException e) {
          throw new UncheckedIOException("tflux: cannot read " + part.path, e);
        }
        if (snap == null) {
          return false;
        }
        queues = snap.sortedQueues();
        for (int i = 0; i < ids.length; i++) {
          if (ids[i] == 0) {
            ((ConstantColumnVector) out[i]).setUtf8String(UTF8String.fromString(part.source));
          } else if (ids[i] == 6) {
            ((ConstantColumnVector) out[i]).setLong(snap.lastIndex);
          } else if (ids[i] == 7) {
            ((ConstantColumnVector) out[i]).setLong(snap.lastTerm);
          }
        }
      }
      for (ColumnVector v : out) {
        if (v instanceof OnHeapColumnVector) {
          ((OnHeapColumnVector) v).reset();
        }
      }
      int rows = 0;
      while (rows < ROWS && q < queues.size()) {
        Snapshot.Queue queue = queues.get(q);
        if (r >= queue.ids.length) {
          q++;
          r = 0;
          continue;
        }
        if (r == 0 && queue.fileOrder) {
          r = firstAtOrAfter(queue.dataAt, part.lo);
          if (r >= queue.ids.length) {
            continue;
          }
        }
        int dataAt = queue.dataAt[r];
        if (dataAt < part.lo || dataAt >= part.hi) {
          if (queue.fileOrder && dataAt >= part.hi) {
            r = queue.ids.length; // the rest of this queue lies after the range
            continue;
          }
          r++;
          continue;
        }
        long id = queue.ids[r];
        if (id < 0) {
          throw new IllegalArgumentException("tflux: record id " + Long.toUnsignedString(id)
              + " exceeds Int64");
        }
        if (replay != null && removed(queue, id)) {
          r++;
          continue;
        }
        for (int i = 0; i < ids.length; i++) {
          switch (ids[i]) {
            case 1:
              ((OnHeapColumnVector) out[i]).putByteArray(rows, queue.name);
              break;
            case 2:
              ((OnHeapColumnVector) out[i]).putInt(rows, queue.implementation);
              break;
            case 3:
              ((OnHeapColumnVector) out[i]).putLong(rows, id);
              break;
            case 4:
              ((OnHeapColumnVector) out[i]).putLong(rows, queue.keys[r]);
              break;
            case 5:
              ((OnHeapColumnVector) out[i]).putByteArray(rows, message(queue.dataAt[r],
                  queue.dataLen[r]), 0, queue.dataLen[r]);
              break;
            case 8: {
              int at = queue.tasks == null ? -1 : Snapshot.find(queue.tasks.delayedIds, id);
              if (at < 0) {
                ((OnHeapColumnVector) out[i]).putNull(rows);
              } else {
                ((OnHeapColumnVector) out[i]).putLong(rows, queue.tasks.dues[at]);
              }
              break;
            }
            case 9: {
              int at = queue.tasks == null ? -1 : Snapshot.find(queue.tasks.attemptIds, id);
              ((OnHeapColumnVector) out[i]).putInt(rows, at < 0 ? 0 : queue.tasks.attempts[at]);
              break;
            }
            default:
              break;
          }
        }
        rows++;
        r++;
      }
      batch.setNumRows(rows);
      return rows > 0;
    }

    /** Whether the plan removed record {@code id} of {@code queue} (the {@link #q}th). */
    private boolean removed(Snapshot.Queue queue, long id) {
      if (planned != q) {
        planned = q;
        java.util.Map<String, ReplayIds.Queue> names = replay.source(part.source);
        plannedQueue = names == null ? null
            : names.get(new String(queue.name, java.nio.charset.StandardCharsets.ISO_8859_1));
        // The snapshot's records are in the incarnation holding LSN -1 (before the log).
        plannedAt = plannedQueue == null ? -1 : plannedQueue.find(-1);
      }
      return plannedAt >= 0 && plannedQueue.removed(plannedAt, id);
    }

    /** The first index whose value is at least {@code lo} in the ascending {@code at}. */
    static int firstAtOrAfter(int[] at, long lo) {
      int a = 0;
      int b = at.length;
      while (a < b) {
        int m = (a + b) >>> 1;
        if (at[m] < lo) {
          a = m + 1;
        } else {
          b = m;
        }
      }
      return a;
    }

    @Override
    public ColumnarBatch get() {
      return batch;
    }

    @Override
    public void close() {}
  }
}
