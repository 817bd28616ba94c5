package io.tflux.spark;

import java.nio.ByteBuffer;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A binary column whose values are slices of the segment the batch came from (a batch never
 * spans two segments): a row costs two ints instead of a copy of its bytes into an on-heap
 * vector, and Spark copies a value out only when it reads it ({@link #getBinary}). The
 * segment's buffer is read-only and stays mapped while a batch refers to it.
 */
final class SliceVector extends ColumnVector {
  private ByteBuffer buf;
  private final int[] at;
  private final int[] len;
  private final boolean[] nulls;
  private int nullCount;

  SliceVector(int capacity) {
    super(DataTypes.BinaryType);
    at = new int[capacity];
    len = new int[capacity];
    nulls = new boolean[capacity];
  }

  /** Clears the vector for a batch of the segment held in {@code segment}. */
  void reset(ByteBuffer segment) {
    buf = segment;
    if (nullCount > 0) {
      java.util.Arrays.fill(nulls, false);
      nullCount = 0;
    }
  }

  void put(int row, ByteBuffer segment, int from, int length) {
    if (segment != buf) {
      throw new IllegalStateException("tflux: one batch reads one segment");
    }
    at[row] = from;
    len[row] = length;
  }

  void putNull(int row) {
    nulls[row] = true;
    nullCount++;
  }

  @Override
  public byte[] getBinary(int row) {
    if (nulls[row]) {
      return null;
    }
    byte[] out = new byte[len[row]];
    buf.get(at[row], out, 0, out.length);
    return out;
  }

  @Override
  public UTF8String getUTF8String(int row) {
    byte[] b = getBinary(row);
    return b == null ? null : UTF8String.fromBytes(b);
  }

  @Override
  public boolean isNullAt(int row) {
    return nulls[row];
  }

  @Override
  public boolean hasNull() {
    return nullCount > 0;
  }

  @Override
  public int numNulls() {
    return nullCount;
  }

  @Override
  public void close() {
    buf = null;
  }

  private static UnsupportedOperationException binaryOnly() {
    return new UnsupportedOperationException("tflux: a binary column");
  }

  @Override
  public boolean getBoolean(int row) {
    throw binaryOnly();
  }

  @Override
  public byte getByte(int row) {
    throw binaryOnly();
  }

  @Override
  public short getShort(int row) {
    throw binaryOnly();
  }

  @Override
  public int getInt(int row) {
    throw binaryOnly();
  }

  @Override
  public long getLong(int row) {
    throw binaryOnly();
  }

  @Override
  public float getFloat(int row) {
    throw binaryOnly();
  }

  @Override
  public double getDouble(int row) {
    throw binaryOnly();
  }

  @Override
  public ColumnarArray getArray(int row) {
    throw binaryOnly();
  }

  @Override
  public ColumnarMap getMap(int row) {
    throw binaryOnly();
  }

  @Override
  public Decimal getDecimal(int row, int precision, int scale) {
    throw binaryOnly();
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw binaryOnly();
  }
}
