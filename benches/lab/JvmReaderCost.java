package io.tflux.spark;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The JVM reader alone, one thread, no Spark job (issue 45): the per-record cost of replay's two
 * scans. Run by {@code benches/lab/jvm_reader_cost.py}, which compiles this file against the
 * reader's jar and pyspark's jars (it lives in the reader's package to reach its classes).
 *
 * <p>Arguments: LOG_DIR SEGMENTS WARMUP ROUNDS PLAN_FILE|- [summary|live|both|frames|all]
 * ({@code both}: summary and live; {@code frames}: the framing walks; {@code all}). PLAN_FILE holds
 * replay's {@code replayPlan} text, then a line {@code incs N,N,...} (the live scan's {@code inc
 * IN (...)}); without it only the summary scan runs.
 */
public final class JvmReaderCost {
  private JvmReaderCost() {}

  public static void main(String[] args) throws Exception {
    String logDir = args[0];
    int segments = Integer.parseInt(args[1]);
    int warmup = Integer.parseInt(args[2]);
    int rounds = Integer.parseInt(args[3]);
    String planFile = args[4];
    String which = args.length > 5 ? args[5] : "both";
    List<String> names = new ArrayList<>();
    try (Stream<Path> s = Files.list(Paths.get(logDir))) {
      s.map(p -> p.getFileName().toString())
          .filter(n -> n.endsWith(".log") || n.endsWith(".log.z")).sorted().forEach(names::add);
    }
    int total = names.size();
    List<String> take = names.subList(0, Math.min(segments, total));
    String source = "base";
    ReplayIds plan = null;
    RowFilter filter = null;
    if (!planFile.equals("-")) {
      String text = new String(Files.readAllBytes(Paths.get(planFile)), StandardCharsets.UTF_8);
      int cut = text.lastIndexOf("\nincs ");
      String incs = text.substring(cut + 6).trim();
      text = text.substring(0, cut);
      plan = ReplayIds.parse(text);
      source = plan.sources.keySet().iterator().next();
      filter = new RowFilter();
      filter.kind = 2; // add_record
      filter.incs = incs.isEmpty() ? new long[0]
          : Arrays.stream(incs.split(",")).mapToLong(Long::parseLong).sorted().toArray();
    }
    LogSource.Chunk[] chunks = new LogSource.Chunk[take.size()];
    for (int i = 0; i < chunks.length; i++) {
      chunks[i] = new LogSource.Chunk(source, logDir, take.get(i), i == total - 1,
          SegmentReader.HEADER_LEN, Long.MAX_VALUE, Long.MIN_VALUE, null);
    }
    long records = walk(chunks, logDir, false);
    System.out.printf("%d segments, %d records%n", chunks.length, records);
    ThreadMXBean mx = ManagementFactory.getThreadMXBean();
    boolean summary = !which.equals("live") && !which.equals("frames");
    boolean live = plan != null && (which.equals("live") || which.equals("both"));
    boolean frames = which.equals("frames") || which.equals("all");
    live |= plan != null && which.equals("all");
    String[] scans = {"summary", "live", "frames", "crc"};
    long[][] cpu = new long[scans.length][rounds];
    long[] rows = new long[scans.length];
    int runs = Math.max(1024, 100_000 / total); // replay's summaryRuns
    for (int round = -warmup; round < rounds; round++) {
      for (int scan = 0; scan < scans.length; scan++) {
        if (!wanted(scan, summary, live, frames)) {
          continue;
        }
        long c0 = mx.getCurrentThreadCpuTime();
        long n = 0;
        if (scan >= 2) {
          n = walk(chunks, logDir, scan == 3);
        } else {
          LogReader r = scan == 0
              ? new LogReader(chunks, Summary.schema(), 0, Long.MAX_VALUE, 4096, null, true,
                  runs, 1L << 27, null)
              : new LogReader(chunks, new StructType(), 0, Long.MAX_VALUE, 4096, plan, false,
                  0, 0, filter);
          while (r.next()) {
            ColumnarBatch b = r.get();
            n += b.numRows();
          }
          r.close();
        }
        long c1 = mx.getCurrentThreadCpuTime();
        if (round >= 0) {
          cpu[scan][round] = c1 - c0;
          rows[scan] = n;
        }
      }
    }
    for (int scan = 0; scan < scans.length; scan++) {
      if (!wanted(scan, summary, live, frames)) {
        continue;
      }
      long[] t = cpu[scan].clone();
      Arrays.sort(t);
      double med = t[t.length / 2];
      System.out.printf("%-7s rows %9d  cpu median %7.1f ms  min %7.1f ms  %5.1f ns/record%n",
          scans[scan], rows[scan], med / 1e6, t[0] / 1e6, med / records);
    }
  }

  private static boolean wanted(int scan, boolean summary, boolean live, boolean frames) {
    return scan == 0 ? summary : scan == 1 ? live : frames;
  }

  /**
   * The framing alone ({@code frames}: marker, term, length, padding; {@code crc}: and the
   * checksum), no delta decoded: what the scans cost before {@link LogColumns}.
   */
  private static long walk(LogSource.Chunk[] chunks, String logDir, boolean crc)
      throws java.io.IOException {
    long n = 0;
    for (LogSource.Chunk c : chunks) {
      String path = Paths.get(logDir, c.segment).toString();
      SegmentReader r = new SegmentReader(c.dialect(path), path, Sources.startLsn(c.segment),
          c.last, c.start, c.end, c.wantLast).open();
      while (r.hasNext()) {
        r.step(crc, null);
      }
      n += r.lsn - r.firstLsn;
    }
    return n;
  }
}
