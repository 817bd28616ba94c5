package io.tflux.spark;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.zip.CRC32;

/**
 * A snapshot file decoded and checked (spec 4, 4.1 and 7.1), the JVM twin of the core's
 * {@code format/snapshot.rs}: either marker, the CRC, the structure, then every rule a restore
 * enforces, with the core's wording and the offending field's file offset.
 */
final class Snapshot {
  static final int MARKER = 0xB6380FC9;
  static final int WIDE_MARKER = 0xB6380FCA;
  /** The task layout (spec 12): the wide header, the state, then the tasks Buffer. */
  static final int TASK_MARKER = 0xB6380FCB;
  /** The core's {@code format::segment::MAX_ENTRY_LSN}: the largest LSN an entry can have. */
  static final long MAX_ENTRY_LSN = Long.MAX_VALUE - 1;
  static final int MIN_QUEUE_LEN = 1 + 4 + 8 + 4 + 4 + 1 + 4;
  static final int MIN_RECORD_LEN = 8 + 8 + 4;

  static final class Queue {
    byte[] name;
    int implementation;
    long lastId;
    int maxQueueSize;
    int maxMessageSize;
    boolean hasRange;
    long min;
    long max;
    int nameAt;
    int configAt;
    int countAt;
    long[] ids;
    long[] keys;
    int[] dataAt;
    int[] dataLen;
    /**
     * The records were stored in id order, so {@link #dataAt} ascends too: a task finds the
     * records of its byte range by binary search instead of walking every record.
     */
    boolean fileOrder;
    /** The queue's task-queue state (spec 12), or null: no entry in the tasks Buffer. */
    Tasks tasks;
  }

  /**
   * One queue's entry of a task-layout snapshot's tasks Buffer, the twin of the core's
   * {@code format/tasks.rs} {@code QueueTasks}: its rules whole (null: no such rule), its
   * delayed records (id, due unix ms) and counted deliveries (id, attempts), ascending ids.
   */
  static final class Tasks {
    byte[] name;
    byte[] deadLetter;
    int deadLetterN;
    /** Retry delay, retry backoff (millionths), retry max delay, lease (ms); null: none. */
    final Long[] ints = new Long[4];
    long[] delayedIds;
    long[] dues;
    long[] attemptIds;
    int[] attempts;

    /** The rules as one JSON object, every rule named (null: none), in spec order. */
    String rulesJson() {
      StringBuilder out = new StringBuilder("{\"dead_letter\":");
      out.append(deadLetter == null ? "null" : "[" + shown(deadLetter) + "," + deadLetterN + "]");
      String[] names = {"retry_delay_ms", "retry_backoff", "retry_max_delay_ms", "lease_ms"};
      for (int i = 0; i < 4; i++) {
        out.append(",\"").append(names[i]).append("\":")
            .append(ints[i] == null ? "null" : String.valueOf(ints[i]));
      }
      return out.append('}').toString();
    }
  }

  final String path;
  final ByteBuffer buf;
  long lastIndex;
  long lastTerm;
  final List<Queue> queues = new ArrayList<>();

  private Snapshot(String path, ByteBuffer buf) {
    this.path = path;
    this.buf = buf;
  }

  /** The last snapshot decoded per path, with the identity of the file it was decoded from. */
  private static final java.util.concurrent.ConcurrentHashMap<String, Cached> CACHE =
      new java.util.concurrent.ConcurrentHashMap<>();
  private static final java.util.concurrent.ConcurrentHashMap<String, Object> LOCKS =
      new java.util.concurrent.ConcurrentHashMap<>();

  private static final class Cached {
    final String identity;
    final java.lang.ref.SoftReference<Snapshot> snap;

    Cached(String identity, Snapshot snap) {
      this.identity = identity;
      this.snap = new java.lang.ref.SoftReference<>(snap);
    }
  }

  /**
   * {@link #read}, shared by the tasks (and the driver) of one JVM: a snapshot split into
   * several partitions, or described to the driver before it is scanned, is decoded and checked
   * once per JVM instead of once per task. A snapshot file is only ever replaced by a rename,
   * so (inode, size, modification time) names its content; the decoded copy is softly held.
   */
  static Snapshot cached(String path) throws IOException {
    // One decode per path at a time: the others wait for it and share it.
    synchronized (LOCKS.computeIfAbsent(path, k -> new Object())) {
      String identity = identity(Paths.get(path));
      Cached now = CACHE.get(path);
      Snapshot s = now != null && now.identity.equals(identity) ? now.snap.get() : null;
      if (s == null) {
        CACHE.remove(path);
        s = read(path);
        if (s != null && identity != null) {
          CACHE.put(path, new Cached(identity, s));
        }
      }
      return s;
    }
  }

  private static String identity(Path p) {
    try {
      java.nio.file.attribute.BasicFileAttributes a = Files.readAttributes(p,
          java.nio.file.attribute.BasicFileAttributes.class);
      return a.fileKey() + "/" + a.size() + "/" + a.lastModifiedTime();
    } catch (IOException e) {
      return null; // read() reports it
    }
  }

  /** Null for an empty file (nothing written yet). */
  static Snapshot read(String path) throws IOException {
    Path p = Paths.get(path);
    if (!Files.isRegularFile(p)) {
      throw new CorruptException(path, -1, "not a regular file");
    }
    long size = Files.size(p);
    if (size > Integer.MAX_VALUE - 64) {
      throw new CorruptException(path, -1, "snapshot file of " + size
          + " bytes is larger than the JVM reader reads (2 GiB)");
    }
    if (size == 0) {
      return null;
    }
    ByteBuffer buf = SegmentReader.map(p);
    Snapshot s = new Snapshot(path, buf);
    s.decode();
    return s;
  }

  private CorruptException at(Cursor.DecodeError e) {
    return new CorruptException(path, e.offset, e.getMessage());
  }

  private void decode() {
    int len = buf.limit();
    Cursor c = new Cursor(buf, 0, len, 0);
    try {
      c.take(4, "snapshot marker");
      int marker = buf.getInt(0);
      boolean wide;
      // TaskFlux's header shares the narrow marker: the layout whose lengths and checksum fit
      // the file says which (the core's snapshot_says, spec section 11).
      taskflux = marker == MARKER && Dialect.snapshotSays(buf, len) == Dialect.TASKFLUX;
      if (marker == MARKER) {
        wide = taskflux;
      } else if (marker == WIDE_MARKER || marker == TASK_MARKER) {
        wide = true;
      } else {
        throw new CorruptException(path, 0, String.format("bad snapshot marker %02X %02X %02X"
            + " %02X (expected B6 38 0F C9, or B6 38 0F CA for the wide layout, or B6 38 0F CB"
            + " with tasks)",
            buf.get(0) & 0xFF, buf.get(1) & 0xFF, buf.get(2) & 0xFF, buf.get(3) & 0xFF));
      }
      if (wide) {
        lastIndex = c.i64("last index");
        lastTerm = c.i64("last term");
      } else {
        lastIndex = c.i32("last index");
        lastTerm = c.i32("last term");
      }
      int stateLenAt = c.pos();
      int stateAt = c.buffer("state length");
      int stateLen = c.lastLen;
      boolean withTasks = marker == TASK_MARKER;
      int tasksAt = withTasks ? c.buffer("tasks length") : 0;
      int tasksLen = withTasks ? c.lastLen : 0;
      int crcAt = c.pos();
      int stored = c.i32("checksum");
      if (c.left() != 0) {
        throw new CorruptException(path, c.pos(), c.left()
            + " trailing bytes after the checksum");
      }
      int computed;
      if (taskflux) {
        computed = Crc32Mpeg2.of(buf, stateAt, stateAt + stateLen);
      } else {
        CRC32 crc = new CRC32();
        ByteBuffer d = buf.duplicate();
        if (wide) {
          d.limit(stateLenAt).position(4);
          crc.update(d);
        }
        d = buf.duplicate();
        d.limit(stateAt + stateLen).position(stateAt);
        crc.update(d);
        if (withTasks) { // the CRC covers the tasks bytes too
          d = buf.duplicate();
          d.limit(tasksAt + tasksLen).position(tasksAt);
          crc.update(d);
        }
        computed = (int) crc.getValue();
      }
      if (computed != stored) {
        throw new CorruptException(path, crcAt, String.format(
            "checksum mismatch (stored 0x%08x, computed 0x%08x)", stored, computed));
      }
      decodeState(new Cursor(buf, stateAt, stateAt + stateLen, stateAt), stateAt);
      check(stateAtOf());
      for (Queue q : queues) {
        sortRecords(q);
      }
      if (withTasks) {
        decodeTasks(new Cursor(buf, tasksAt, tasksAt + tasksLen, tasksAt), tasksAt);
      }
    } catch (Cursor.DecodeError e) {
      throw at(e);
    }
  }

  /** Whether the file has the task layout (then some queues have {@link Queue#tasks}). */
  boolean withTasks() {
    return buf.getInt(0) == TASK_MARKER;
  }

  /**
   * The tasks Buffer ({@code format/tasks.rs} {@code decode}, each entry checked as the core's
   * {@code snapshot::check_tasks} does), offsets in the file ({@code base} is where the tasks
   * bytes start).
   */
  private void decodeTasks(Cursor c, int base) throws Cursor.DecodeError {
    try {
      List<Tasks> seen = new ArrayList<>();
      int n = c.len("task queue count", 1 + 1 + 4 + 4);
      for (int i = 0; i < n; i++) {
        int at = c.pos();
        Tasks t = new Tasks();
        int nameAt = c.queueName();
        t.name = new byte[c.lastLen];
        buf.get(nameAt, t.name);
        rules(c, t);
        int delayed = c.len("delayed count", 16);
        t.delayedIds = new long[delayed];
        t.dues = new long[delayed];
        for (int k = 0; k < delayed; k++) {
          t.delayedIds[k] = c.i64("delayed id");
          t.dues[k] = c.i64("due");
        }
        int counted = c.len("attempts count", 12);
        t.attemptIds = new long[counted];
        t.attempts = new int[counted];
        for (int k = 0; k < counted; k++) {
          t.attemptIds[k] = c.i64("attempts id");
          int v = c.i32("attempts");
          if (v < 1) {
            throw c.fail(c.pos() - 4, "attempts " + v + " is below 1");
          }
          t.attempts[k] = v;
        }
        String bad = checkTasks(t, seen);
        if (bad != null) {
          throw c.fail(at, bad);
        }
        seen.add(t);
      }
      if (c.left() != 0) {
        throw c.fail(c.pos(), c.left() + " trailing bytes after the tasks");
      }
    } catch (Cursor.DecodeError e) {
      throw new Cursor.DecodeError(base + e.offset, e.getMessage());
    }
  }

  /** A RulesChange that names every rule ({@code rules::decode_change}, structural only). */
  private static void rules(Cursor c, Tasks t) throws Cursor.DecodeError {
    if (c.bool("dead letter change flag") && c.bool("dead letter flag")) {
      int at = c.queueName();
      t.deadLetter = new byte[c.lastLen];
      c.buf.get(at, t.deadLetter);
      t.deadLetterN = c.i32("dead letter deliveries");
    }
    String[] fields = {"retry delay", "retry backoff", "retry max delay", "lease"};
    for (int i = 0; i < 4; i++) {
      if (c.bool(fields[i] + " change flag") && c.bool(fields[i] + " flag")) {
        t.ints[i] = c.i64(fields[i]);
      }
    }
  }

  /** The index of {@code id} in the ascending (unsigned) {@code ids}, or -1. */
  static int find(long[] ids, long id) {
    int a = 0;
    int b = ids.length;
    while (a < b) {
      int m = (a + b) >>> 1;
      int c = Long.compareUnsigned(ids[m], id);
      if (c == 0) {
        return m;
      }
      if (c < 0) {
        a = m + 1;
      } else {
        b = m;
      }
    }
    return -1;
  }

  /** The core's {@code display_name}: the default queue as (default), others quoted. */
  static String displayName(byte[] name) {
    return name.length == 0 ? "(default)" : shown(name);
  }

  /** {@code snapshot::check_tasks}: null when entry {@code t} is valid, else why not. */
  private String checkTasks(Tasks t, List<Tasks> before) {
    String shown = displayName(t.name);
    for (Tasks b : before) {
      if (Arrays.equals(b.name, t.name)) {
        return "queue " + shown + " has two task entries";
      }
    }
    Queue q = null;
    for (Queue x : queues) {
      if (Arrays.equals(x.name, t.name)) {
        q = x;
      }
    }
    if (q == null) {
      return "task entry of queue " + shown + ", which the state does not hold";
    }
    String rules = checkRules(t);
    if (rules != null) {
      return "queue " + shown + ": " + rules;
    }
    String[] what = {"delayed", "attempts"};
    long[][] lists = {t.delayedIds, t.attemptIds};
    for (int w = 0; w < 2; w++) {
      long[] ids = lists[w];
      for (int i = 1; i < ids.length; i++) {
        if (Long.compareUnsigned(ids[i - 1], ids[i]) >= 0) {
          return "queue " + shown + ": " + what[w] + " ids are not strictly ascending";
        }
      }
      for (long id : ids) {
        if (find(q.ids, id) < 0) {
          return "queue " + shown + ": " + what[w] + " id " + Long.toUnsignedString(id)
              + " is not one of its records";
        }
      }
    }
    q.tasks = t;
    return null;
  }

  /**
   * {@code QueueRules::check}: the dead-letter queue is another queue and N >= 1, delays >= 0,
   * backoff >= 1 (1000000 millionths), lease > 0 (the names were checked by the decode).
   */
  static String checkRules(Tasks t) {
    if (t.deadLetter != null) {
      if (Arrays.equals(t.deadLetter, t.name)) {
        return "dead letter: a queue cannot dead-letter to itself";
      }
      if (t.deadLetterN < 1) {
        return "dead letter: deliveries " + t.deadLetterN + " is below 1";
      }
    }
    if (t.ints[0] != null && t.ints[0] < 0) {
      return "retry delay " + t.ints[0] + " ms is negative";
    }
    if (t.ints[2] != null && t.ints[2] < 0) {
      return "retry max delay " + t.ints[2] + " ms is negative";
    }
    if (t.ints[1] != null && t.ints[1] < 1_000_000L) {
      // Rust's f64 Display: plain digits, the shortest that round-trip.
      String v = new java.math.BigDecimal(Double.toString(t.ints[1] / 1_000_000.0))
          .stripTrailingZeros().toPlainString();
      return "retry backoff " + v + " is below 1";
    }
    if (t.ints[3] != null && t.ints[3] <= 0) {
      return "lease " + t.ints[3] + " ms is not positive";
    }
    return null;
  }

  private int stateAtOf() {
    return buf.getInt(0) != MARKER || taskflux ? 24 : 16;
  }

  /** Whether the file has TaskFlux's header (Int64 index and term, CRC-32/MPEG-2). */
  boolean taskflux;

  private void decodeState(Cursor c, int stateAt) throws Cursor.DecodeError {
    try {
      int count = c.len("queue count", MIN_QUEUE_LEN);
      for (int i = 0; i < count; i++) {
        Queue q = new Queue();
        q.nameAt = stateAt + c.pos();
        int nameAt = c.queueName();
        q.name = new byte[c.lastLen];
        buf.get(nameAt, q.name);
        q.configAt = stateAt + c.pos();
        q.implementation = c.i32("implementation");
        q.lastId = c.i64("last id");
        q.maxQueueSize = c.i32("max queue size");
        q.maxMessageSize = c.i32("max message size");
        q.hasRange = c.bool("key range flag");
        if (q.hasRange) {
          q.min = c.i64("key range min");
          q.max = c.i64("key range max");
        }
        q.countAt = stateAt + c.pos();
        int n = c.len("record count", MIN_RECORD_LEN);
        q.ids = new long[n];
        q.keys = new long[n];
        q.dataAt = new int[n];
        q.dataLen = new int[n];
        for (int r = 0; r < n; r++) {
          q.ids[r] = c.i64("record id");
          q.keys[r] = c.i64("record priority");
          q.dataAt[r] = c.buffer("record data length");
          q.dataLen[r] = c.lastLen;
        }
        queues.add(q);
      }
      if (c.left() != 0) {
        throw c.fail(c.pos(), c.left() + " trailing bytes in the state after the last queue");
      }
    } catch (Cursor.DecodeError e) {
      throw new Cursor.DecodeError(stateAt + e.offset, e.getMessage());
    }
  }

  private static String shown(byte[] name) {
    StringBuilder sb = new StringBuilder("\"");
    for (byte b : name) {
      char ch = (char) (b & 0xFF);
      if (ch == '"' || ch == '\\') {
        sb.append('\\');
      }
      sb.append(ch);
    }
    return sb.append('"').toString();
  }

  /** The restore's rules ({@code Snapshot::check} of the core), in its order. */
  private void check(int stateAt) {
    if (lastIndex < 0) {
      throw new CorruptException(path, 4, "negative last index " + lastIndex);
    }
    if (lastIndex > MAX_ENTRY_LSN) {
      // The log restarts after a snapshot ahead of it, at last index + 1: past the largest LSN
      // there is no such start (it would wrap to a negative LSN). Issue 43.
      throw new CorruptException(path, 4, "last index " + lastIndex
          + " is past the largest LSN an entry can have (" + MAX_ENTRY_LSN + ")");
    }
    if (lastTerm < 0) {
      throw new CorruptException(path, buf.getInt(0) == MARKER ? 8 : 12,
          "negative last term " + lastTerm);
    }
    Set<String> names = new HashSet<>();
    for (Queue q : queues) {
      String name = shown(q.name);
      String config = config(q);
      if (config != null) {
        throw new CorruptException(path, q.configAt, "queue " + name + ": " + config);
      }
      long at = q.countAt + 4;
      for (int r = 0; r < q.ids.length; r++) {
        long id = q.ids[r];
        if (Long.compareUnsigned(id, q.lastId) > 0) {
          throw new CorruptException(path, at, "record id " + Long.toUnsignedString(id)
              + " in queue " + name + " is above its last id " + Long.toUnsignedString(q.lastId));
        }
        long key = q.keys[r];
        if (q.implementation == 2 && q.hasRange && (key < q.min || key > q.max)) {
          throw new CorruptException(path, at + 8, "queue " + name + " record "
              + Long.toUnsignedString(id) + ": key " + key
              + " is outside the array queue's range [" + q.min + ", " + q.max + "]");
        }
        at += MIN_RECORD_LEN + q.dataLen[r];
      }
      int dup = firstRepeat(q.ids);
      if (dup >= 0) {
        long recAt = q.countAt + 4;
        for (int r = 0; r < dup; r++) {
          recAt += MIN_RECORD_LEN + q.dataLen[r];
        }
        throw new CorruptException(path, recAt, "duplicate record id "
            + Long.toUnsignedString(q.ids[dup]) + " in queue " + name);
      }
      if (!names.add(new String(q.name, java.nio.charset.StandardCharsets.ISO_8859_1))) {
        throw new CorruptException(path, q.nameAt, "duplicate queue " + name);
      }
    }
    if (!names.contains("")) {
      throw new CorruptException(path, stateAt,
          "no default queue (empty name) in the snapshot");
    }
  }

  /** {@code QueueConfig::from_raw}: null when valid, else why not. */
  private static String config(Queue q) {
    if (q.maxQueueSize < -1) {
      return "max queue size " + q.maxQueueSize + " is invalid (-1 or 0..2147483647)";
    }
    if (q.maxMessageSize < -1) {
      return "max message size " + q.maxMessageSize + " is invalid (-1 or 0..2147483647)";
    }
    if (q.implementation == 2 && !q.hasRange) {
      return "a queue array (implementation 2) needs a key range";
    }
    if (q.implementation != 1 && q.implementation != 2) {
      return "unknown queue implementation code " + q.implementation
          + " (1 = heap, 2 = array)";
    }
    if (q.hasRange && q.min > q.max) {
      return "key range min " + q.min + " is greater than max " + q.max;
    }
    return null;
  }

  /** The index of the first record whose id an earlier record already has, or -1. */
  private static int firstRepeat(long[] ids) {
    boolean sorted = true;
    for (int i = 1; i < ids.length; i++) {
      if (Long.compareUnsigned(ids[i - 1], ids[i]) >= 0) {
        sorted = false;
        break;
      }
    }
    if (sorted) {
      return -1;
    }
    Integer[] order = new Integer[ids.length];
    for (int i = 0; i < ids.length; i++) {
      order[i] = i;
    }
    Arrays.sort(order, (a, b) -> {
      int c = Long.compareUnsigned(ids[a], ids[b]);
      return c != 0 ? c : Integer.compare(a, b);
    });
    int best = -1;
    for (int i = 1; i < order.length; i++) {
      if (ids[order[i - 1]] == ids[order[i]] && (best < 0 || order[i] < best)) {
        best = order[i];
      }
    }
    return best;
  }

  /**
   * Records in ascending id order (the order the core's decode returns them in). A store writes
   * them sorted, so this is usually a check only; the boxed sort serves other writers.
   */
  private static void sortRecords(Queue q) {
    int n = q.ids.length;
    q.fileOrder = true;
    for (int i = 1; i < n && q.fileOrder; i++) {
      q.fileOrder = Long.compareUnsigned(q.ids[i - 1], q.ids[i]) < 0;
    }
    if (q.fileOrder) {
      return;
    }
    Integer[] order = new Integer[n];
    for (int i = 0; i < n; i++) {
      order[i] = i;
    }
    Arrays.sort(order, Comparator.comparing(i -> q.ids[i], Long::compareUnsigned));
    long[] ids = new long[n];
    long[] keys = new long[n];
    int[] at = new int[n];
    int[] len = new int[n];
    for (int i = 0; i < n; i++) {
      ids[i] = q.ids[order[i]];
      keys[i] = q.keys[order[i]];
      at[i] = q.dataAt[order[i]];
      len[i] = q.dataLen[order[i]];
    }
    q.ids = ids;
    q.keys = keys;
    q.dataAt = at;
    q.dataLen = len;
  }

  /** Queues in name order (as the core's SnapshotColumns lists them). */
  List<Queue> sortedQueues() {
    List<Queue> out = new ArrayList<>(queues);
    out.sort((a, b) -> Arrays.compareUnsigned(a.name, b.name));
    return out;
  }
}
