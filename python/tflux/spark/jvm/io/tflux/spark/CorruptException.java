package io.tflux.spark;

/**
 * Bytes that do not follow the format: names the file and the byte offset where the bad
 * record, header or field starts (the message reads like the core's CorruptionError).
 */
public final class CorruptException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  public final String path;
  /** Byte offset in the file, or -1 when the problem has no single place. */
  public final long offset;

  public CorruptException(String path, long offset, String reason) {
    super("tflux CorruptionError: corrupt " + path + (offset >= 0 ? " at offset " + offset : "")
        + ": " + reason);
    this.path = path;
    this.offset = offset;
  }
}
