package io.tflux.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/** The options of the formats (strings, as Spark passes them), read as the Python source does. */
final class Options {
  private Options() {}

  static String get(Map<String, String> options, String name) {
    String v = options.get(name);
    if (v == null) {
      v = options.get(name.toLowerCase(Locale.ROOT));
    }
    return v;
  }

  static boolean flag(Map<String, String> options, String name, boolean dflt) {
    String v = get(options, name);
    if (v == null) {
      return dflt;
    }
    String t = v.trim().toLowerCase(Locale.ROOT);
    if (t.equals("true") || t.equals("1") || t.equals("yes")) {
      return true;
    }
    if (t.equals("false") || t.equals("0") || t.equals("no")) {
      return false;
    }
    throw new IllegalArgumentException("tflux: option " + name + "='" + v
        + "' is not a boolean (true/false)");
  }

  /** An LSN option, or -1 when absent. */
  static long lsn(Map<String, String> options, String name) {
    String v = get(options, name);
    if (v == null || v.trim().isEmpty()) {
      return -1;
    }
    long lsn;
    try {
      lsn = Long.parseLong(v.trim());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("tflux: option " + name + "='" + v
          + "' is not an LSN (an integer)");
    }
    if (lsn < 0) {
      throw new IllegalArgumentException("tflux: option " + name + "='" + v + "' is negative");
    }
    return lsn;
  }

  static long bytes(Map<String, String> options, String name, long dflt) {
    String v = get(options, name);
    if (v == null || v.trim().isEmpty()) {
      return dflt;
    }
    long n = org.apache.spark.network.util.JavaUtils.byteStringAsBytes(v.trim());
    if (n <= 0) {
      throw new IllegalArgumentException("tflux: option " + name + "='" + v
          + "' must be positive");
    }
    return n;
  }

  /** The {@code columns} option checked against the first {@code n} names (null: all). */
  static List<String> columns(Map<String, String> options, String[] names, int n) {
    String text = get(options, "columns");
    if (text == null || text.trim().isEmpty()) {
      return null;
    }
    List<String> known = Arrays.asList(names).subList(0, n);
    List<String> want = new ArrayList<>();
    List<String> unknown = new ArrayList<>();
    for (String c : text.split(",")) {
      String s = c.trim();
      if (s.isEmpty()) {
        continue;
      }
      want.add(s);
      if (!known.contains(s)) {
        unknown.add(s);
      }
    }
    if (!unknown.isEmpty()) {
      throw new IllegalArgumentException("tflux: unknown column(s) " + String.join(", ", unknown)
          + " (known: " + String.join(", ", known) + ")");
    }
    return want;
  }
}
