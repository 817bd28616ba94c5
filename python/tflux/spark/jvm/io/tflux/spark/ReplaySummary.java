package io.tflux.spark;

import static org.apache.spark.sql.functions.array;
import static org.apache.spark.sql.functions.coalesce;
import static org.apache.spark.sql.functions.col;
import static org.apache.spark.sql.functions.inline;
import static org.apache.spark.sql.functions.lit;
import static org.apache.spark.sql.functions.max;
import static org.apache.spark.sql.functions.not;
import static org.apache.spark.sql.functions.struct;
import static org.apache.spark.sql.functions.sum;
import static org.apache.spark.sql.functions.when;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.DataFrameReader;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * Spark replay's step 1 as one DataFrame ({@code rebuild.summaries}): the {@code summary} scan
 * ({@link Summary}) of every log directory, aggregated per (log directory, source, queue,
 * segment, event); with ranges, the removed ranges' rows kept apart and the bitmaps folded by
 * {@link BitsFold} on the executors. Built here, in one call from Python, because each column
 * expression Python builds is a py4j round trip: about 900 of them per replay (issue 45).
 */
public final class ReplaySummary {
  private ReplaySummary() {}

  static final String[] KEYS = {"log_dir", "source", "queue", "segment", "ev_lsn", "ev_kind",
      "ev_impl"};
  /** A range's own keys: its rows stay apart from each other by them. */
  static final String[] RANGED = {"rm_lsn", "rm_lo", "rm_hi"};
  /** The fold's input, in {@link BitsFold#INPUT}'s order. */
  static final String[] FOLD_IN = {"rm_lsn", "rm_lo", "rm_count", "rm_bits", "rm_from", "rm_to"};

  /**
   * The summary rows of the logs in {@code logs}: a line per log directory, {@code HEXDIR
   * FROM DIALECT} (the directory's UTF-8 bytes in hex, the first LSN to read, its dialect or
   * {@code -} for what its files say). With {@code ranges}, the removed ranges too (at most
   * {@code runs} runs and {@code bits} bits of bitmaps per chunk, see {@link Summary}).
   */
  public static Dataset<Row> frame(SparkSession spark, String logs, boolean ranges, int runs,
      long bits) {
    Dataset<Row> scan = null;
    for (String line : logs.split("\n")) {
      if (line.isEmpty()) {
        continue;
      }
      String[] f = line.split(" ");
      String dir = new String(HexFormat.of().parseHex(f[0]), StandardCharsets.UTF_8);
      DataFrameReader reader = spark.read().format("tflux").option("fromLsn", f[1])
          .option("summary", "true");
      if (ranges) {
        reader = reader.option("summaryRuns", runs).option("summaryBits", bits);
      }
      if (!f[2].equals("-")) {
        reader = reader.option("dialect", f[2]);
      }
      Dataset<Row> df = reader.load(dir).withColumn("log_dir", lit(dir));
      scan = scan == null ? df : scan.unionByName(df);
    }
    if (scan == null) {
      throw new IllegalArgumentException("tflux: no log directory to summarize");
    }
    Column last = max("last").alias("last");
    Column adds = coalesce(max("adds"), lit(0)).alias("adds");
    Column removes = sum("removes").alias("removes");
    if (!ranges) {
      return scan.groupBy(cols(KEYS)).agg(last, adds, removes);
    }
    return fold(scan, last, adds, removes);
  }

  /**
   * The scan's rows grouped as without ranges and kept apart by {@code rm_lsn}, {@code rm_lo}
   * and {@code rm_hi}, but the bitmap rows (one per chunk and group: at 64M scattered deltas,
   * 774 MB of them, each about as long as the queue's ids) grouped by name alone and ORed by
   * {@link BitsFold} where their LSN intervals touch, so each incarnation's removes come as one
   * bitmap per stretch of consecutive chunks holding them: the same rows as one bitmap per
   * group, fewer.
   */
  static Dataset<Row> fold(Dataset<Row> scan, Column last, Column adds, Column removes) {
    Column bits = col("rm_bits").isNotNull();
    // A bitmap row's keys: its name's alone (``bits`` sets it apart from the name's other rows).
    List<String> apart = Arrays.asList("segment", "rm_lsn", "rm_lo", "rm_hi");
    List<Column> picked = new ArrayList<>();
    for (String c : concat(KEYS, RANGED)) {
      picked.add(apart.contains(c) ? when(not(bits), col(c)).alias(c) : col(c));
    }
    picked.add(bits.alias("bits"));
    for (String c : new String[] {"last", "adds", "removes", "rm_count"}) {
      picked.add(col(c));
    }
    Column[] foldIn = new Column[FOLD_IN.length];
    for (int i = 0; i < FOLD_IN.length; i++) {
      picked.add(col(FOLD_IN[i]).alias("in_" + FOLD_IN[i]));
      foldIn[i] = col("in_" + FOLD_IN[i]);
    }
    UserDefinedFunction fold = functions.udaf(new BitsFold(), Encoders.row(BitsFold.INPUT));
    Dataset<Row> folded = scan.select(picked.toArray(new Column[0]))
        .groupBy(cols(concat(concat(KEYS, RANGED), new String[] {"bits"})))
        .agg(last, adds, removes, sum("rm_count").alias("rm_count"),
            fold.apply(foldIn).alias("fold"));
    // Each bitmap left as a row of its own; every other row as it is. (A data type, not its
    // name: parsing "binary" was a fifth of this method's time in a warm JVM.)
    Column own = struct(col("rm_lsn"), col("rm_lo"), col("rm_hi"), col("rm_count"),
        lit(null).cast(DataTypes.BinaryType).alias("rm_bits"));
    List<Column> rows = new ArrayList<>(Arrays.asList(cols(KEYS)));
    rows.addAll(Arrays.asList(col("last"), col("adds"), col("removes")));
    // inline: the struct's fields (rm_lsn, rm_lo, rm_hi, rm_count, rm_bits) as columns.
    rows.add(inline(when(col("bits"), col("fold.pieces")).otherwise(array(own))));
    return folded.select(rows.toArray(new Column[0]));
  }

  private static Column[] cols(String[] names) {
    Column[] out = new Column[names.length];
    for (int i = 0; i < names.length; i++) {
      out[i] = col(names[i]);
    }
    return out;
  }

  private static String[] concat(String[] a, String[] b) {
    String[] out = Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, out, a.length, b.length);
    return out;
  }
}
