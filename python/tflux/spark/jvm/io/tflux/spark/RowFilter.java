package io.tflux.spark;

import java.io.Serializable;
import java.util.Arrays;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;

/**
 * The filters the log reader applies itself, so that Spark does not evaluate them again on
 * every row: {@code kind = 'NAME'}, {@code kind IS NOT NULL} and, with the {@code replayPlan}
 * option, {@code inc IN (...)} (replay's live records: {@code rebuild.py} filters the adds of
 * the final incarnations). A row they drop is not returned, but its record is decoded and
 * checked, and an AddRecord is counted in {@code queue_adds}, as for any row (issue 45: the
 * string comparison of {@code kind} on every row, and the removes' rows, were a fifth of the
 * live scan's CPU).
 */
final class RowFilter implements Serializable {
  private static final long serialVersionUID = 1L;
  /** No kind asked for. */
  static final int ANY = -1;
  /** Two different kinds, or a name that is no kind's: no row. */
  static final int NONE = -2;

  /** The one kind returned (an index into {@link LogColumns#KIND_NAMES}), ANY or NONE. */
  int kind = ANY;
  /** Rows with a null {@code kind} (a channel's messages) are not returned. */
  boolean kindNotNull;
  /** The {@code inc} values returned (sorted), or null: any. */
  long[] incs;

  /** Whether no filter was taken (then the scan returns every row, as before). */
  boolean isEmpty() {
    return kind == ANY && !kindNotNull && incs == null;
  }

  /**
   * Takes {@code f} when this reader can apply it (then Spark does not); {@code plan}: the scan
   * has the {@code replayPlan} option (and so an {@code inc} column).
   */
  boolean take(Filter f, boolean plan) {
    if (f instanceof EqualTo && "kind".equals(((EqualTo) f).attribute())) {
      Object value = ((EqualTo) f).value();
      if (!(value instanceof String)) {
        return false;
      }
      int k = Arrays.asList(LogColumns.KIND_NAMES).indexOf(value);
      kind = k < 0 || (kind != ANY && kind != k) ? NONE : k;
      return true;
    }
    if (f instanceof IsNotNull && "kind".equals(((IsNotNull) f).attribute())) {
      kindNotNull = true;
      return true;
    }
    if (plan && f instanceof In && "inc".equals(((In) f).attribute())) {
      Object[] values = ((In) f).values();
      long[] got = new long[values.length];
      int n = 0;
      for (Object v : values) {
        if (v instanceof Long || v instanceof Integer) {
          got[n++] = ((Number) v).longValue();
        } else if (v != null) {
          return false; // a null in the list matches nothing: IN is then null or true
        }
      }
      got = Arrays.copyOf(got, n);
      if (incs != null) { // two IN filters: the values in both
        got = Arrays.stream(got).filter(this::inc).toArray();
      }
      Arrays.sort(got);
      incs = got;
      return true;
    }
    return false;
  }

  /** Whether a row of kind {@code k} (-1: null, a channel's message) is returned. */
  boolean kind(int k) {
    if (k < 0) {
      return !kindNotNull && kind == ANY && incs == null; // inc is null there too
    }
    return kind == ANY || kind == k;
  }

  /** Whether a row whose {@code inc} is {@code inc} is returned. */
  boolean inc(long inc) {
    return incs == null || Arrays.binarySearch(incs, inc) >= 0;
  }

  /** As the scan's description shows it (e.g. {@code kind add_record, inc in [0, 2]}). */
  @Override
  public String toString() {
    StringBuilder out = new StringBuilder();
    if (kind != ANY) {
      out.append("kind ").append(kind == NONE ? "none" : LogColumns.KIND_NAMES[kind]);
    } else if (kindNotNull) {
      out.append("kind not null");
    }
    if (incs != null) {
      out.append(out.length() > 0 ? ", " : "").append("inc in ").append(Arrays.toString(incs));
    }
    return out.toString();
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof RowFilter)) {
      return false;
    }
    RowFilter r = (RowFilter) o;
    return kind == r.kind && kindNotNull == r.kindNotNull && Arrays.equals(incs, r.incs);
  }

  @Override
  public int hashCode() {
    return java.util.Objects.hash(kind, kindNotNull, Arrays.hashCode(incs));
  }
}
