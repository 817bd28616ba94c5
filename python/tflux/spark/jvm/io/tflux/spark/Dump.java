package io.tflux.spark;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Prints what the JVM decoders read, one JSON object per line, so tests can hold them against
 * the golden vectors and the core without starting Spark:
 *
 * <pre>
 * Dump segment PATH FIRST_LSN sealed|last [SPLIT_OFFSET...]   records: lsn, term, data (hex);
 *                                                             framed in the dialect its first
 *                                                             record says ($TFLUX_DIALECT chooses)
 * Dump crc32-mpeg2 HEX...                                     each input's CRC-32/MPEG-2
 * Dump delta HEX...                                           each delta's columns (or error;
 *                                                             kept_ids a list, rules JSON text)
 * Dump snapshot PATH                                          header, records, then (task
 *                                                             layout) each queue's task state
 *                                                             in file order: rules (JSON),
 *                                                             delayed [id, due], attempts [id, n]
 * Dump dialect BASE                                           the dialect its files say (its
 *                                                             metadata file, snapshot and the
 *                                                             first record of every segment)
 * </pre>
 * A failure prints {"error": message} and exits 1.
 */
public final class Dump {
  private Dump() {}

  public static void main(String[] args) throws Exception {
    StringBuilder out = new StringBuilder();
    try {
      switch (args[0]) {
        case "segment":
          segment(args, out);
          break;
        case "delta":
          for (int i = 1; i < args.length; i++) {
            try {
              delta(args[i], out);
            } catch (RuntimeException e) {
              out.append("{\"error\": ").append(str(e.getMessage())).append("}\n");
            }
          }
          break;
        case "snapshot":
          snapshot(args[1], out);
          break;
        case "dialect": {
          java.nio.file.Path data = java.nio.file.Paths.get(args[1], "data");
          java.nio.file.Path snap = data.resolve("tflux.snapshot");
          String snapshot = java.nio.file.Files.exists(snap) ? snap.toString() : null;
          Dialect d = Dialect.of(
              new Sources.Source(args[1], data.resolve("log").toString(), snapshot), null);
          out.append("{\"dialect\": ").append(str(d.label)).append("}\n");
          break;
        }
        case "crc32-mpeg2":
          for (int i = 1; i < args.length; i++) {
            byte[] data = unhex(args[i]);
            out.append(String.format("{\"crc\": \"%08x\"}%n", Crc32Mpeg2.of(data)));
          }
          break;
        default:
          throw new IllegalArgumentException("unknown mode " + args[0]);
      }
    } catch (RuntimeException e) {
      System.out.print(out);
      System.out.println("{\"error\": " + str(e.getMessage()) + "}");
      System.exit(1);
    }
    System.out.print(out);
  }

  private static void segment(String[] args, StringBuilder out) throws Exception {
    String path = args[1];
    long first = Long.parseLong(args[2]);
    boolean last = args[3].equals("last");
    List<Long> cuts = new ArrayList<>();
    cuts.add((long) SegmentReader.HEADER_LEN);
    for (int i = 4; i < args.length; i++) {
      cuts.add(Long.parseLong(args[i]));
    }
    Dialect dialect = Dialect.parse(System.getenv("TFLUX_DIALECT"));
    if (dialect == null) {
      Dialect said = Dialect.segmentSays(java.nio.file.Paths.get(path));
      dialect = said != null ? said : Dialect.SPEC;
    }
    for (int i = 0; i < cuts.size(); i++) {
      long start = cuts.get(i);
      long end = i + 1 < cuts.size() ? cuts.get(i + 1) : Long.MAX_VALUE;
      SegmentReader r =
          new SegmentReader(dialect, path, first, last, start, end, Long.MIN_VALUE).open();
      SegmentReader.Visitor v = (lsn, term, at, len, off) -> {
        out.append("{\"lsn\": ").append(lsn).append(", \"term\": ").append(term)
            .append(", \"offset\": ").append(off).append(", \"data\": \"")
            .append(hex(r.buf, at, len)).append("\"}\n");
      };
      while (r.hasNext()) {
        r.step(true, v);
      }
    }
  }

  private static byte[] unhex(String hexData) {
    byte[] data = new byte[hexData.length() / 2];
    for (int i = 0; i < data.length; i++) {
      data[i] = (byte) Integer.parseInt(hexData.substring(2 * i, 2 * i + 2), 16);
    }
    return data;
  }

  private static void delta(String hexData, StringBuilder out) {
    byte[] data = unhex(hexData);
    List<StructField> fields = new ArrayList<>();
    for (int i = 2; i < LogColumns.QUEUE_ADDS; i++) {
      fields.add(DataTypes.createStructField(LogColumns.NAMES[i], LogColumns.TYPES[i], true));
    }
    StructType schema = DataTypes.createStructType(fields);
    LogColumns cols = new LogColumns(schema, 1);
    ByteBuffer wrapped = ByteBuffer.wrap(data);
    cols.reset(wrapped);
    cols.add(0, 0, 0, wrapped, 0, data.length, "<delta>", 0);
    ColumnarBatch b = cols.finish(1);
    out.append("{");
    for (int i = 0; i < fields.size(); i++) {
      String name = fields.get(i).name();
      out.append(i == 0 ? "" : ", ").append(str(name)).append(": ");
      org.apache.spark.sql.vectorized.ColumnVector v = b.column(i);
      if (v.isNullAt(0)) {
        out.append("null");
      } else if (fields.get(i).dataType() == DataTypes.LongType) {
        out.append(v.getLong(0));
      } else if (fields.get(i).dataType() == DataTypes.IntegerType) {
        out.append(v.getInt(0));
      } else if (fields.get(i).dataType() == DataTypes.StringType) {
        out.append(str(v.getUTF8String(0).toString()));
      } else if (fields.get(i).dataType() instanceof org.apache.spark.sql.types.ArrayType) {
        long[] items = v.getArray(0).toLongArray();
        out.append('[');
        for (int k = 0; k < items.length; k++) {
          out.append(k == 0 ? "" : ", ").append(items[k]);
        }
        out.append(']');
      } else {
        byte[] bytes = v.getBinary(0);
        out.append('"').append(hex(ByteBuffer.wrap(bytes), 0, bytes.length)).append('"');
      }
    }
    out.append("}\n");
  }

  private static void snapshot(String path, StringBuilder out) throws Exception {
    Snapshot s = Snapshot.read(path);
    if (s == null) {
      out.append("{\"empty\": true}\n");
      return;
    }
    out.append("{\"last_index\": ").append(s.lastIndex).append(", \"last_term\": ")
        .append(s.lastTerm).append("}\n");
    for (Snapshot.Queue q : s.sortedQueues()) {
      for (int r = 0; r < q.ids.length; r++) {
        out.append("{\"queue\": ").append(str(new String(q.name, "US-ASCII")))
            .append(", \"implementation\": ").append(q.implementation)
            .append(", \"record_id\": ").append(Long.toUnsignedString(q.ids[r]))
            .append(", \"key\": ").append(q.keys[r]).append(", \"message\": \"")
            .append(hex(s.buf, q.dataAt[r], q.dataLen[r])).append("\"}\n");
      }
    }
    for (Snapshot.Queue q : s.queues) {
      Snapshot.Tasks t = q.tasks;
      if (t == null) {
        continue;
      }
      out.append("{\"tasks\": ").append(str(new String(q.name, "US-ASCII")))
          .append(", \"rules\": ").append(t.rulesJson()).append(", \"delayed\": [");
      for (int i = 0; i < t.delayedIds.length; i++) {
        out.append(i > 0 ? ", " : "").append('[').append(Long.toUnsignedString(t.delayedIds[i]))
            .append(", ").append(t.dues[i]).append(']');
      }
      out.append("], \"attempts\": [");
      for (int i = 0; i < t.attemptIds.length; i++) {
        out.append(i > 0 ? ", " : "").append('[').append(Long.toUnsignedString(t.attemptIds[i]))
            .append(", ").append(t.attempts[i]).append(']');
      }
      out.append("]}\n");
    }
  }

  private static String hex(ByteBuffer b, int at, int len) {
    StringBuilder sb = new StringBuilder(len * 2);
    for (int i = 0; i < len; i++) {
      sb.append(String.format("%02x", b.get(at + i) & 0xFF));
    }
    return sb.toString();
  }

  private static String str(String s) {
    StringBuilder sb = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') {
        sb.append('\\').append(c);
      } else if (c < 0x20 || c > 0x7e) {
        sb.append(String.format("\\u%04x", (int) c));
      } else {
        sb.append(c);
      }
    }
    return sb.append('"').toString();
  }
}
