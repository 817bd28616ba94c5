package io.tflux.spark;

import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.expressions.Aggregator;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * Replay's removed bitmaps folded on the executors (issue 45): the aggregate of {@code (rm_lsn,
 * rm_lo, rm_count, rm_bits, rm_from, rm_to)} ({@link ReplaySummary#fold}) over the bitmap rows
 * of the {@code summary} scan ({@link Summary}) of one queue name. Two bitmaps whose LSN intervals
 * ({@code rm_from..rm_to}, where the scan saw no CreateQueue/DeleteQueue of the name) touch or
 * overlap are of one incarnation: they become one bitmap (the OR of both, the smaller {@code
 * rm_lsn}, the sum of {@code rm_count}, the union of the intervals), whatever order Spark merges
 * the partial aggregates in. Bitmaps whose intervals do not touch stay apart (the driver places
 * each by its {@code rm_lsn}, as before). The result, {@code pieces}: one row per bitmap left,
 * in the summary's columns; per incarnation, one bitmap for each stretch of consecutive chunks
 * with its removes (a chunk without any breaks the stretch).
 *
 * <p>Memory: a merged bitmap holds at most {@link #MAX_WORDS} words (2^28 ids, what replay's plan
 * takes at most, {@code rebuild.PLAN_BITS}); two whose union would be larger stay apart.
 */
public final class BitsFold extends Aggregator<Row, BitsFold.Buf, Row> {
  private static final long serialVersionUID = 1L;
  static final long MAX_WORDS = (1L << 28) / 64;
  static final StructType INPUT = new StructType().add("rm_lsn", DataTypes.LongType)
      .add("rm_lo", DataTypes.LongType).add("rm_count", DataTypes.LongType)
      .add("rm_bits", DataTypes.BinaryType).add("rm_from", DataTypes.LongType)
      .add("rm_to", DataTypes.LongType);
  static final StructType PIECE = new StructType().add("rm_lsn", DataTypes.LongType)
      .add("rm_lo", DataTypes.LongType).add("rm_hi", DataTypes.LongType)
      .add("rm_count", DataTypes.LongType).add("rm_bits", DataTypes.BinaryType);
  static final StructType OUTPUT = new StructType().add("pieces",
      DataTypes.createArrayType(PIECE, false));

  /** One bitmap: bit i of {@code words} is id {@code base + i}; LSNs {@code from..to}. */
  static final class Piece implements Serializable {
    private static final long serialVersionUID = 1L;
    long lsn;
    long base;
    long count;
    long from;
    long to;
    long[] words;
  }

  /** The bitmaps so far, by ascending {@code from}, no two of them touching (unless too big). */
  public static final class Buf implements Serializable {
    private static final long serialVersionUID = 1L;
    final ArrayList<Piece> pieces = new ArrayList<>();

    void add(Piece p) {
      int at = 0;
      while (at < pieces.size() && pieces.get(at).from <= p.from) {
        at++;
      }
      pieces.add(at, p);
      // Join with the neighbours it touches (a join may make the next one touch too).
      int i = Math.max(0, at - 1);
      while (i + 1 < pieces.size()) {
        Piece a = pieces.get(i);
        Piece b = pieces.get(i + 1);
        if (touch(a, b)) {
          Piece joined = join(a, b);
          if (joined != null) {
            pieces.set(i, joined);
            pieces.remove(i + 1);
            continue;
          }
        }
        if (i > at) {
          break; // past the new piece: the rest were apart already
        }
        i++;
      }
    }
  }

  private static boolean touch(Piece a, Piece b) {
    return b.from <= a.to + 1 && a.from <= b.to + 1; // LSNs are below 2^63 - 1
  }

  /** {@code a} and {@code b} as one bitmap, or null when it would pass {@link #MAX_WORDS}. */
  private static Piece join(Piece a, Piece b) {
    long lo = Math.min(a.base, b.base) >>> 6;
    long hi = Math.max((a.base >>> 6) + a.words.length, (b.base >>> 6) + b.words.length);
    if (hi - lo > MAX_WORDS) {
      return null;
    }
    Piece out = a;
    Piece other = b;
    if ((b.base >>> 6) == lo && b.words.length == hi - lo) {
      out = b; // b covers a's words: OR a into it
      other = a;
    } else if ((a.base >>> 6) != lo || a.words.length != hi - lo) {
      out = new Piece();
      out.words = new long[(int) (hi - lo)];
      out.base = lo << 6;
      or(out, a);
    }
    or(out, other);
    out.lsn = Math.min(a.lsn, b.lsn);
    out.count = a.count + b.count;
    out.from = Math.min(a.from, b.from);
    out.to = Math.max(a.to, b.to);
    return out;
  }

  private static void or(Piece into, Piece from) {
    int at = (int) ((from.base - into.base) >>> 6);
    long[] w = into.words;
    long[] f = from.words;
    for (int i = 0; i < f.length; i++) {
      w[at + i] |= f[i];
    }
  }

  @Override
  public Buf zero() {
    return new Buf();
  }

  @Override
  public Buf reduce(Buf buf, Row row) {
    if (row == null || row.isNullAt(3)) {
      return buf; // not a bitmap's row
    }
    byte[] bytes = (byte[]) row.get(3);
    Piece p = new Piece();
    p.lsn = row.getLong(0);
    p.base = row.getLong(1);
    p.count = row.getLong(2);
    p.from = row.isNullAt(4) ? Long.MAX_VALUE : row.getLong(4);
    p.to = row.isNullAt(5) ? Long.MIN_VALUE : row.getLong(5);
    p.words = new long[bytes.length / 8];
    ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(p.words);
    buf.add(p);
    return buf;
  }

  @Override
  public Buf merge(Buf a, Buf b) {
    for (Piece p : b.pieces) {
      a.add(p);
    }
    return a;
  }

  @Override
  public Row finish(Buf buf) {
    List<Row> rows = new ArrayList<>();
    for (Piece p : buf.pieces) {
      int n = p.words.length;
      while (n > 1 && p.words[n - 1] == 0) {
        n--; // no trailing empty words
      }
      ByteBuffer b = ByteBuffer.allocate(n * 8).order(ByteOrder.LITTLE_ENDIAN);
      b.asLongBuffer().put(p.words, 0, n);
      rows.add(RowFactory.create(p.lsn, p.base, p.base + 64L * n - 1, p.count, b.array()));
    }
    return RowFactory.create((Object) rows.toArray(new Row[0]));
  }

  @Override
  public Encoder<Buf> bufferEncoder() {
    return Encoders.javaSerialization(Buf.class);
  }

  @Override
  public Encoder<Row> outputEncoder() {
    return Encoders.row(OUTPUT);
  }
}
