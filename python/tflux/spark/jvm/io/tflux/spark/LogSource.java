package io.tflux.spark;

import java.io.Serializable;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
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
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * {@code spark.read.format("tflux")} on the JVM: the log records of one or more base
 * directories as columnar batches, with column pruning, LSN-range pushdown, partitions split by
 * bytes and preferred locations. Same columns, options and rows as the Python source
 * ({@code tflux.spark.source}); streaming reads are served by that source (registered as
 * {@code tflux_python}).
 */
public final class LogSource implements TableProvider, DataSourceRegister {
  /** The name the Python source is registered under when this reader serves "tflux". */
  static final String PYTHON_NAME = "tflux_python";

  @Override
  public String shortName() {
    return "tflux";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return LogColumns.schema(options);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    return new LogTable(schema);
  }

  static final class LogTable implements Table, SupportsRead {
    final StructType schema;

    LogTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return "tflux";
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new LogScanBuilder(schema, options);
    }
  }

  static final class LogScanBuilder
      implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters {
    final CaseInsensitiveStringMap options;
    StructType required;
    long from;
    long to;
    Filter[] pushed = new Filter[0];
    /** The filters the reader applies itself (Spark then does not evaluate them). */
    final RowFilter rowFilter = new RowFilter();

    LogScanBuilder(StructType schema, CaseInsensitiveStringMap options) {
      this.options = options;
      this.required = schema;
      this.from = Math.max(Options.lsn(options, "fromLsn"), 0);
      long to = Options.lsn(options, "toLsn");
      this.to = to < 0 ? Long.MAX_VALUE : to;
      if (to >= 0 && from > to) {
        throw new IllegalArgumentException("tflux: fromLsn " + from + " is after toLsn " + to);
      }
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      required = requiredSchema;
    }

    /**
     * Narrows the LSN range by filters on {@code lsn} (Spark still evaluates them) and takes
     * those {@link RowFilter} applies in the reader (Spark does not evaluate these again).
     */
    @Override
    public Filter[] pushFilters(Filter[] filters) {
      List<Filter> used = new ArrayList<>();
      List<Filter> after = new ArrayList<>();
      boolean summary = Options.flag(options, "summary", false);
      boolean plan = Options.get(options, "replayPlan") != null;
      for (Filter f : filters) {
        if (narrow(f)) {
          used.add(f);
          after.add(f);
        } else if (!summary && rowFilter.take(f, plan)) {
          used.add(f);
        } else {
          after.add(f);
        }
      }
      pushed = used.toArray(new Filter[0]);
      return after.toArray(new Filter[0]);
    }

    private boolean narrow(Filter f) {
      if (f instanceof And) {
        boolean l = narrow(((And) f).left());
        boolean r = narrow(((And) f).right());
        return l || r;
      }
      String attr;
      Object value;
      if (f instanceof GreaterThan) {
        attr = ((GreaterThan) f).attribute();
        value = ((GreaterThan) f).value();
      } else if (f instanceof GreaterThanOrEqual) {
        attr = ((GreaterThanOrEqual) f).attribute();
        value = ((GreaterThanOrEqual) f).value();
      } else if (f instanceof LessThan) {
        attr = ((LessThan) f).attribute();
        value = ((LessThan) f).value();
      } else if (f instanceof LessThanOrEqual) {
        attr = ((LessThanOrEqual) f).attribute();
        value = ((LessThanOrEqual) f).value();
      } else if (f instanceof EqualTo) {
        attr = ((EqualTo) f).attribute();
        value = ((EqualTo) f).value();
      } else {
        return false;
      }
      if (!"lsn".equals(attr) || !(value instanceof Long || value instanceof Integer)) {
        return false;
      }
      long v = ((Number) value).longValue();
      if (f instanceof GreaterThan) {
        from = Math.max(from, v == Long.MAX_VALUE ? v : v + 1);
      } else if (f instanceof GreaterThanOrEqual) {
        from = Math.max(from, v);
      } else if (f instanceof LessThan) {
        to = Math.min(to, v - 1);
      } else if (f instanceof LessThanOrEqual) {
        to = Math.min(to, v);
      } else {
        from = Math.max(from, v);
        to = Math.min(to, v);
      }
      return true;
    }

    @Override
    public Filter[] pushedFilters() {
      return pushed;
    }

    @Override
    public Scan build() {
      return new LogScan(required, options, from, to, rowFilter.isEmpty() ? null : rowFilter);
    }
  }

  /** One byte range of one segment file (or, for a remote source, its whole log). */
  static final class Chunk implements Serializable {
    private static final long serialVersionUID = 1L;
    final String source;
    final String logDir;
    /** The segment file name; null: list {@code logDir} on the executor and read it all. */
    final String segment;
    final boolean last;
    final long start;
    final long end;
    final long wantLast;
    /** "spec" or "taskflux"; null: the segment's own first record says (a remote source). */
    final String dialect;
    /**
     * For a scan that needs no column: the records of this sealed segment in the scan's LSN
     * range, known from the segment names (the file is not read); -1: read the file.
     */
    long known = -1;

    /** A sealed segment counted from the names alone (see {@link Planner#chunks}). */
    static Chunk counted(String source, String logDir, String segment, long records,
        String dialect) {
      Chunk c = new Chunk(source, logDir, segment, false, SegmentReader.HEADER_LEN,
          Long.MAX_VALUE, Long.MIN_VALUE, dialect);
      c.known = Math.max(records, 0);
      return c;
    }

    Chunk(String source, String logDir, String segment, boolean last, long start, long end,
        long wantLast, String dialect) {
      this.dialect = dialect;
      this.source = source;
      this.logDir = logDir;
      this.segment = segment;
      this.last = last;
      this.start = start;
      this.end = end;
      this.wantLast = wantLast;
    }

    /** How the segment at {@code path} (this chunk's file) is framed. */
    Dialect dialect(String path) {
      if (dialect != null) {
        return Dialect.parse(dialect);
      }
      try {
        Dialect said = Dialect.segmentSays(Paths.get(path));
        return said != null ? said : Dialect.SPEC;
      } catch (java.io.IOException e) {
        throw new java.io.UncheckedIOException("tflux: cannot read " + path, e);
      }
    }

    long size() {
      if (known >= 0) {
        return 0; // nothing is read
      }
      if (segment == null || end == Long.MAX_VALUE) {
        try {
          return segment == null ? 1L << 30
              : Math.max(Files.size(Paths.get(logDir, segment)) - start, 0);
        } catch (java.io.IOException e) {
          return 0;
        }
      }
      return end - start;
    }
  }

  static final class LogPartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final Chunk[] chunks;
    final String[] hosts;

    LogPartition(Chunk[] chunks, String[] hosts) {
      this.chunks = chunks;
      this.hosts = hosts;
    }

    @Override
    public String[] preferredLocations() {
      return hosts;
    }
  }

  static final class LogScan implements Scan, Batch {
    final StructType schema;
    final CaseInsensitiveStringMap options;
    final long from;
    final long to;
    /** The filters the reader applies (see {@link RowFilter}), or null. */
    final RowFilter rowFilter;

    LogScan(StructType schema, CaseInsensitiveStringMap options, long from, long to,
        RowFilter rowFilter) {
      this.schema = schema;
      this.options = options;
      this.from = from;
      this.to = to;
      this.rowFilter = rowFilter;
    }

    @Override
    public StructType readSchema() {
      return schema;
    }

    /** Equal scans let Spark reuse one exchange for a scan a plan holds twice. */
    @Override
    public boolean equals(Object o) {
      if (!(o instanceof LogScan)) {
        return false;
      }
      LogScan s = (LogScan) o;
      return schema.equals(s.schema) && options.equals(s.options) && from == s.from
          && to == s.to && java.util.Objects.equals(rowFilter, s.rowFilter);
    }

    @Override
    public int hashCode() {
      return java.util.Objects.hash(schema, options, from, to, rowFilter);
    }

    @Override
    public String description() {
      return "tflux log " + Options.get(options, "path") + " lsn " + from + ".."
          + (to == Long.MAX_VALUE ? "" : Long.toString(to))
          + (rowFilter == null ? "" : " filtered: " + rowFilter);
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    /** Streaming is the Python source's (its offsets and checkpoints). */
    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      PythonDataSourceV2 py = new PythonDataSourceV2();
      py.setShortName(PYTHON_NAME);
      Table t = py.getTable(py.inferSchema(options), new Transform[0],
          options.asCaseSensitiveMap());
      return ((SupportsRead) t).newScanBuilder(options).build()
          .toMicroBatchStream(checkpointLocation);
    }

    @Override
    public InputPartition[] planInputPartitions() {
      List<Sources.Source> sources = Sources.resolve(options);
      if (Options.flag(options, "verify", false)) {
        Planner.verify(sources);
      }
      Map<String, String> hosts = Planner.locations(options);
      boolean raw = Options.flag(options, "rawData", false);
      for (Sources.Source src : sources) {
        if (!raw && src.logDir != null && Sources.isChannel(src.base)) {
          throw new IllegalArgumentException("tflux: " + src.base + " is a channel directory:"
              + " its records are messages, not deltas; read them with option rawData=true");
        }
      }
      long splitBytes = Planner.splitBytes(options, sources);
      List<InputPartition> parts = new ArrayList<>();
      for (Sources.Source src : sources) {
        if (src.logDir == null) {
          continue;
        }
        String host = hosts.get(src.base);
        String[] prefer = host == null ? new String[0] : new String[] {host};
        if (src.remote) {
          Chunk whole = new Chunk(src.base, src.logDir, null, false, 0, Long.MAX_VALUE,
              Long.MIN_VALUE, src.dialect);
          parts.add(new LogPartition(new Chunk[] {whole}, prefer));
          continue;
        }
        // Removed ranges in a replayPlan, and the filters the reader applies, drop rows: such
        // a scan reads its records.
        boolean countOnly = schema.fields().length == 0
            && !Options.flag(options, "summary", false)
            && Options.get(options, "replayPlan") == null && rowFilter == null;
        List<Chunk> chunks = Planner.chunks(src, from, to, splitBytes, countOnly);
        parts.addAll(Planner.pack(chunks, splitBytes, prefer));
      }
      return parts.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      int rows = (int) Math.min(Options.bytes(options, "batchRows", 4096), 1 << 20);
      String plan = Options.get(options, "replayPlan");
      int runs = (int) Math.min(Options.bytes(options, "summaryRuns", Summary.MAX_RUNS),
          1 << 24);
      long bits = Math.min(Options.bytes(options, "summaryBits", Summary.MAX_BITS), 1L << 34);
      return new Factory(schema, from, to, rows, plan == null ? null : ReplayIds.parse(plan),
          Options.flag(options, "summary", false), runs, bits, rowFilter);
    }
  }

  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    final StructType schema;
    final long from;
    final long to;
    final int batchRows;
    final ReplayIds replay;
    final boolean summary;
    final int summaryRuns;
    final long summaryBits;
    final RowFilter rowFilter;

    Factory(StructType schema, long from, long to, int batchRows, ReplayIds replay,
        boolean summary, int summaryRuns, long summaryBits, RowFilter rowFilter) {
      this.rowFilter = rowFilter;
      this.summary = summary;
      this.summaryRuns = summaryRuns;
      this.summaryBits = summaryBits;
      this.schema = schema;
      this.from = from;
      this.to = to;
      this.batchRows = batchRows;
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
      return new LogReader(((LogPartition) partition).chunks, schema, from, to, batchRows,
          replay, summary, summaryRuns, summaryBits, rowFilter);
    }
  }
}
