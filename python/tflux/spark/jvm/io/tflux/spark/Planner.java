package io.tflux.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.read.InputPartition;

/** How a log scan is cut into Spark partitions (driver side). */
final class Planner {
  private Planner() {}

  static final long OPEN_COST = 4L << 20;

  private static String conf(String key, String dflt) {
    try {
      return SparkSession.active().conf().get(key, dflt);
    } catch (RuntimeException e) {
      return dflt;
    }
  }

  /** Whether the active session sets {@code key} itself (not left at its default). */
  private static boolean isSet(String key) {
    try {
      return SparkSession.active().conf().contains(key);
    } catch (RuntimeException e) {
      return false;
    }
  }

  /**
   * Bytes per partition, as Spark's file sources choose them: {@code min(maxPartitionBytes,
   * max(openCostInBytes, total / parallelism))}; the {@code splitBytes} option overrides it.
   */
  static long splitBytes(Map<String, String> options, List<Sources.Source> sources) {
    long total = 0;
    long largest = 0;
    int files = 0;
    for (Sources.Source src : sources) {
      if (src.logDir == null || src.remote) {
        continue;
      }
      for (String name : Sources.segmentNames(src.logDir)) {
        long size = size(src.logDir, name);
        total += size;
        largest = Math.max(largest, size);
        files++;
      }
    }
    return splitBytes(options, total, files, largest);
  }

  /** {@link #splitBytes(Map, List)} for {@code files} files of {@code total} bytes. */
  static long splitBytes(Map<String, String> options, long total, int files) {
    return splitBytes(options, total, files, 0);
  }

  /**
   * {@link #splitBytes(Map, List)} for {@code files} files of {@code total} bytes, the largest
   * {@code largest} bytes.
   *
   * <p>Replay's scans (options {@code summary} or {@code replayPlan}) take two partitions per
   * core instead, unless the session sets {@code spark.sql.files.maxPartitionBytes}: each of
   * their tasks costs a plan to deserialize and a bitmap row to fold, and their reader streams
   * through mapped segments whatever a partition's size, so Spark's 128 MB cap only adds tasks
   * (issue 45: the 16M-delta priority base, 1.2 GB, replays 10% faster on {@code local[2]} in 4
   * tasks than in 13, and as fast with the other core busy). A partition is packed with
   * files until the next would pass the split ({@link #pack}), so the split is a share plus the
   * largest file: then no more partitions than two per core come out (a fifth partition on two
   * cores would leave one idle for a wave).
   */
  static long splitBytes(Map<String, String> options, long total, int files, long largest) {
    long given = Options.bytes(options, "splitBytes", -1);
    if (given > 0) {
      return Math.max(given, 64);
    }
    boolean replay = Options.flag(options, "summary", false)
        || Options.get(options, "replayPlan") != null;
    if (replay && !isSet("spark.sql.files.maxPartitionBytes")) {
      long open = org.apache.spark.network.util.JavaUtils.byteStringAsBytes(
          conf("spark.sql.files.openCostInBytes", "4m"));
      long all = total + files * open;
      return Math.max(open, all / (2L * Math.max(parallelism(), 1)) + largest + open);
    }
    long max = org.apache.spark.network.util.JavaUtils.byteStringAsBytes(
        conf("spark.sql.files.maxPartitionBytes", "128m"));
    long open = org.apache.spark.network.util.JavaUtils.byteStringAsBytes(
        conf("spark.sql.files.openCostInBytes", "4m"));
    int parallelism = parallelism();
    String minNum = conf("spark.sql.files.minPartitionNum", "");
    if (!minNum.isEmpty()) {
      parallelism = Integer.parseInt(minNum);
    }
    total += files * open;
    return Math.min(max, Math.max(open, total / Math.max(parallelism, 1)));
  }

  /** The session's default parallelism (its cores in local mode), or 1 outside a session. */
  static int parallelism() {
    try {
      return SparkSession.active().sparkContext().defaultParallelism();
    } catch (RuntimeException e) {
      return 1;
    }
  }

  static long size(String dir, String name) {
    return size(Paths.get(dir, name).toString());
  }

  static long size(String path) {
    try {
      return Files.size(Paths.get(path));
    } catch (IOException e) {
      return 0; // the task reports a vanished file
    }
  }

  /**
   * The chunks of one source overlapping LSNs {@code from..to}: one per segment, sealed
   * segments larger than {@code splitBytes} cut into byte ranges from the directory listing, and
   * a large active segment cut at record starts its checked records reach ({@link
   * #checkedCuts}).
   */
  static List<LogSource.Chunk> chunks(Sources.Source src, long from, long to, long splitBytes) {
    return chunks(src, from, to, splitBytes, false);
  }

  /**
   * {@link #chunks(Sources.Source, long, long, long)}; with {@code countOnly} (the scan needs no
   * column, as {@code count()}), a sealed segment is one chunk that knows its record count
   * without reading the file: the LSNs from its name to the next segment's name (segments are
   * contiguous, spec 3), within {@code from..to}. Only the active segment is read.
   */
  static List<LogSource.Chunk> chunks(Sources.Source src, long from, long to, long splitBytes,
      boolean countOnly) {
    List<LogSource.Chunk> out = new ArrayList<>();
    String dialect;
    try {
      dialect = src.dialect != null ? src.dialect : Dialect.of(src, null).label;
    } catch (IOException e) {
      throw new UncheckedIOException("tflux: cannot read " + src.base, e);
    }
    List<String> names = Sources.segmentNames(src.logDir);
    for (int i = 0; i < names.size(); i++) {
      String name = names.get(i);
      long start = Sources.startLsn(name);
      boolean sealed = i + 1 < names.size();
      long end = sealed ? Sources.startLsn(names.get(i + 1)) - 1 : Long.MAX_VALUE;
      if (start > to) {
        break;
      }
      if (end < from) {
        continue;
      }
      long want = sealed ? Math.min(end, to) : Long.MIN_VALUE;
      if (sealed && countOnly) {
        long records = Math.min(end, to) - Math.max(start, from) + 1;
        out.add(LogSource.Chunk.counted(src.base, src.logDir, name, records, dialect));
        continue;
      }
      long size = size(src.logDir, name);
      long at = SegmentReader.HEADER_LEN;
      if (name.endsWith(".z")) { // a compressed segment decodes whole: one task
        out.add(new LogSource.Chunk(src.base, src.logDir, name, !sealed, at, Long.MAX_VALUE,
            want, dialect));
        continue;
      }
      if (sealed) {
        while (size - at > splitBytes + splitBytes / 4) {
          out.add(new LogSource.Chunk(src.base, src.logDir, name, false, at, at + splitBytes,
              Long.MIN_VALUE, dialect));
          at += splitBytes;
        }
      } else if (size - at > splitBytes + splitBytes / 4) {
        // The active segment's checked records, cut at record starts; its last chunk reads on
        // from there as the unsplit segment would (a torn tail ends it, appends are read).
        long[] cuts = checkedCuts(Dialect.parse(dialect), Paths.get(src.logDir, name).toString(),
            start, splitBytes);
        for (long cut : cuts) {
          out.add(new LogSource.Chunk(src.base, src.logDir, name, false, at, cut,
              Long.MIN_VALUE, dialect));
          at = cut;
        }
      }
      out.add(new LogSource.Chunk(src.base, src.logDir, name, !sealed, at, Long.MAX_VALUE,
          want, dialect));
    }
    return out;
  }

  /**
   * Where the active segment at {@code path} may be cut into byte ranges: the start offsets of
   * records about {@code splitBytes} apart, each preceded only by records whose framing and CRC
   * this walk checked. In the active segment the first bad record ends the data (a torn tail,
   * spec 3) and records are not self-synchronising, so only a walk from the file's start with
   * every CRC checked (the tasks' own reader, {@link SegmentReader}) can say where data ends; a
   * range cut here never starts past that end or inside a record. The last cut is kept a
   * quarter split short of the checked end so that the tail's chunk is not tiny.
   */
  static long[] checkedCuts(Dialect dialect, String path, long firstLsn, long splitBytes) {
    SegmentReader r = new SegmentReader(dialect, path, firstLsn, true, SegmentReader.HEADER_LEN,
        Long.MAX_VALUE, Long.MIN_VALUE);
    try {
      r.open();
    } catch (IOException e) {
      return new long[0]; // the task reports it
    } catch (CorruptException e) {
      return new long[0]; // the task reports it
    }
    List<Long> cuts = new ArrayList<>();
    long next = SegmentReader.HEADER_LEN + splitBytes;
    try {
      while (r.hasNext()) {
        r.step(true, null);
        if (!r.done && r.at >= next) {
          cuts.add((long) r.at);
          next = r.at + splitBytes;
        }
      }
    } catch (CorruptException e) {
      // Corruption (not a torn tail) after the last cut: the tail's task reports it.
    }
    // The records checked end at r.at; drop cuts that would leave a sliver after them.
    while (!cuts.isEmpty() && r.at - cuts.get(cuts.size() - 1) < splitBytes / 4) {
      cuts.remove(cuts.size() - 1);
    }
    long[] out = new long[cuts.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = cuts.get(i);
    }
    return out;
  }

  /**
   * Chunks packed in order into partitions of about {@code splitBytes} (Spark's rule); when
   * that leaves a last wave of tasks shorter than the cores, packed again with a target that
   * makes the count a multiple of the cores, if it does: 15 partitions on 2 cores take 8 waves
   * with one core idle in the last, 16 smaller ones take 8 full waves.
   */
  static List<InputPartition> pack(List<LogSource.Chunk> chunks, long splitBytes,
      String[] hosts) {
    List<InputPartition> parts = packInto(chunks, splitBytes, hosts);
    int cores = parallelism();
    int n = parts.size();
    if (cores > 1 && n > cores && n % cores != 0) {
      long total = 0;
      for (LogSource.Chunk c : chunks) {
        total += c.size() + OPEN_COST;
      }
      long even = ((long) n + cores - 1) / cores * cores;
      List<InputPartition> balanced = packInto(chunks, Math.max(1, total / even), hosts);
      if (balanced.size() % cores == 0) {
        return balanced;
      }
    }
    return parts;
  }

  private static List<InputPartition> packInto(List<LogSource.Chunk> chunks, long splitBytes,
      String[] hosts) {
    List<InputPartition> parts = new ArrayList<>();
    List<LogSource.Chunk> current = new ArrayList<>();
    long used = 0;
    for (LogSource.Chunk c : chunks) {
      long size = c.size();
      if (!current.isEmpty() && used + size > splitBytes) {
        parts.add(new LogSource.LogPartition(current.toArray(new LogSource.Chunk[0]), hosts));
        current = new ArrayList<>();
        used = 0;
      }
      current.add(c);
      used += size + OPEN_COST;
    }
    if (!current.isEmpty()) {
      parts.add(new LogSource.LogPartition(current.toArray(new LogSource.Chunk[0]), hosts));
    }
    return parts;
  }

  /** The {@code locations} option: {@code BASE=HOST[,BASE=HOST...]}. */
  static Map<String, String> locations(Map<String, String> options) {
    Map<String, String> out = new HashMap<>();
    String text = Options.get(options, "locations");
    if (text == null || text.trim().isEmpty()) {
      return out;
    }
    for (String item : text.split(",")) {
      int eq = item.lastIndexOf('=');
      if (eq <= 0) {
        throw new IllegalArgumentException("tflux: option locations: '" + item
            + "' is not BASE=HOST");
      }
      String base = Paths.get(item.substring(0, eq).trim()).toAbsolutePath().normalize()
          .toString();
      out.put(base, item.substring(eq + 1).trim());
    }
    return out;
  }

  /**
   * The {@code verify} option: every record of every segment (CRC, framing, terms, and the
   * LSNs where the next segment starts), before any task runs.
   */
  static void verify(List<Sources.Source> sources) {
    for (Sources.Source src : sources) {
      if (src.logDir == null || src.remote) {
        continue; // a remote source is checked by the task that reads it
      }
      List<String> names = Sources.segmentNames(src.logDir);
      for (int i = 0; i < names.size(); i++) {
        boolean sealed = i + 1 < names.size();
        long next = sealed ? Sources.startLsn(names.get(i + 1)) : Long.MIN_VALUE;
        String path = Paths.get(src.logDir, names.get(i)).toString();
        SegmentReader r = new SegmentReader(Dialect.parse(src.dialect), path,
            Sources.startLsn(names.get(i)), !sealed, SegmentReader.HEADER_LEN, Long.MAX_VALUE,
            sealed ? next - 1 : Long.MIN_VALUE);
        try {
          r.open();
        } catch (IOException e) {
          throw new UncheckedIOException("tflux: cannot read " + path, e);
        }
        while (r.hasNext()) {
          r.step(true, null);
        }
        if (sealed && r.lsn > next) {
          throw new CorruptException(path, -1, "holds entries up to LSN " + (r.lsn - 1)
              + ", but the next segment starts at " + next + " (overlap)");
        }
      }
    }
  }
}
