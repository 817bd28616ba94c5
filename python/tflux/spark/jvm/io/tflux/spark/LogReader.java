package io.tflux.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Paths;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Deque;
import java.util.List;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Reads the chunks of one partition into columnar batches of up to {@code batchRows} rows. */
final class LogReader implements PartitionReader<ColumnarBatch>, SegmentReader.Visitor {
  private final Deque<LogSource.Chunk> chunks;
  private final LogColumns cols;
  private final long from;
  private final long to;
  private final int batchRows;
  private SegmentReader cur;
  private ColumnarBatch batch;
  private int rows;
  /** Rows of a counted chunk (see {@link LogSource.Chunk#known}) not yet returned. */
  private long counted;

  /** The {@code summary} option's rows (then {@link #cols} only decodes and counts), or null. */
  private final Summary summary;
  private LogSource.Chunk chunk;

  LogReader(LogSource.Chunk[] chunks, StructType schema, long from, long to, int batchRows,
      ReplayIds replay, boolean summarize, int summaryRuns, long summaryBits,
      RowFilter rowFilter) {
    this.chunks = new ArrayDeque<>(Arrays.asList(chunks));
    if (summarize) {
      StructType counting = new StructType().add(LogColumns.NAMES[LogColumns.QUEUE_ADDS],
          LogColumns.TYPES[LogColumns.QUEUE_ADDS]);
      this.cols = new LogColumns(counting, 1, null);
      this.summary = new Summary(cols.adds, schema, summaryRuns, summaryBits);
      cols.summary = summary;
    } else {
      this.cols = new LogColumns(schema, batchRows, replay, rowFilter);
      this.summary = null;
    }
    this.from = from;
    this.to = to;
    this.batchRows = batchRows;
  }

  @Override
  public boolean next() {
    while (true) {
      if (counted > 0) {
        // A scan without columns: batches of empty rows, as many as the chunk holds.
        int n = (int) Math.min(counted, 1 << 24);
        counted -= n;
        batch = cols.finish(n);
        return true;
      }
      if (cur == null || !cur.hasNext()) {
        if (chunks.isEmpty()) {
          return false;
        }
        open(chunks.poll());
        continue;
      }
      if (summary != null) {
        // The whole chunk, then its few rows.
        while (cur.hasNext()) {
          cur.step(true, this);
        }
        batch = summary.finish(chunk.source, chunk.segment);
        if (batch != null) {
          return true;
        }
        continue;
      }
      cols.reset(cur.buf);
      rows = 0;
      while (rows < batchRows && cur.hasNext()) {
        cur.step(true, this);
      }
      if (rows > 0) {
        batch = cols.finish(rows);
        return true;
      }
    }
  }

  private void open(LogSource.Chunk c) {
    chunk = c;
    if (c.segment == null) {
      // A source the driver could not list (node-local): plan it here, unsplit.
      Sources.Source src = new Sources.Source(c.source, c.logDir, null, true, c.dialect);
      Sources.checkHere(src);
      List<LogSource.Chunk> local = Planner.chunks(src, from, to, Long.MAX_VALUE);
      for (int i = local.size() - 1; i >= 0; i--) {
        chunks.addFirst(local.get(i));
      }
      cur = null;
      return;
    }
    String path = Paths.get(c.logDir, c.segment).toString();
    if (path.endsWith(".log") && java.nio.file.Files.exists(Paths.get(path + ".z"))) {
      path += ".z"; // compressed since the driver listed it
    }
    if (c.known >= 0) {
      // Counted from the names; a segment gone since the listing fails as a read would.
      SegmentReader.checkRegular(Paths.get(path));
      cur = null;
      counted = c.known;
      return;
    }
    cur = new SegmentReader(c.dialect(path), path, Sources.startLsn(c.segment), c.last, c.start,
        c.end, c.wantLast);
    try {
      if (cols.adds == null) {
        cur.open();
      } else {
        // queue_adds counts from the segment's start: count the records before this split.
        cols.adds.clear();
        cur.open(this::countBefore);
      }
    } catch (IOException e) {
      throw new UncheckedIOException("tflux: cannot read " + path, e);
    }
    cols.setFile(c.source, c.segment);
    cols.messages = Sources.isChannel(c.source);
  }

  @Override
  public void record(long lsn, int term, int dataAt, int dataLen, long fileOffset) {
    if (lsn < from || lsn > to) {
      return;
    }
    // A row the replay plan drops (false) is filled again by the next record.
    if (cols.add(summary != null ? 0 : rows, lsn, term, cur.buf, dataAt, dataLen, cur.path,
        fileOffset + cur.dialect.header) && summary == null) {
      rows++;
    }
  }

  private void countBefore(long lsn, int term, int dataAt, int dataLen, long fileOffset) {
    if (lsn >= from && lsn <= to) {
      cols.adds.countDelta(cur.buf, dataAt, dataLen);
    }
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public void close() {
    cur = null;
  }
}
