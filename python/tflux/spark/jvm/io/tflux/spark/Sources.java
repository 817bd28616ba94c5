package io.tflux.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.nio.file.DirectoryStream;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.PathMatcher;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * PATH options resolved into sources (one node's base directory, its log directory and snapshot
 * file), as the Python source's {@code _paths.resolve}: base directories, {@code
 * <base>/data/log} or a bare log directory, snapshot files; several by commas or a glob.
 */
final class Sources {
  private Sources() {}

  /** One node's data; {@code logDir} or {@code snapshot} may be null. */
  static final class Source implements Serializable {
    private static final long serialVersionUID = 1L;
    final String base;
    final String logDir;
    final String snapshot;
    /** Named in the {@code locations} option and absent here: listed by its task on its host. */
    final boolean remote;
    /**
     * "spec" or "taskflux" (spec section 11), as its files say ({@link Dialect#of}); null for a
     * remote source not chosen by the option (its task decides where the files are).
     */
    final String dialect;

    Source(String base, String logDir, String snapshot) {
      this(base, logDir, snapshot, false, null);
    }

    Source(String base, String logDir, String snapshot, boolean remote, String dialect) {
      this.base = base;
      this.logDir = logDir;
      this.snapshot = snapshot;
      this.remote = remote;
      this.dialect = dialect;
    }

    /** This source in the dialect its files say, agreeing with the option (a remote one as is). */
    Source detected(Dialect chosen) throws IOException {
      if (remote) {
        return new Source(base, logDir, snapshot, true, chosen == null ? null : chosen.label);
      }
      return new Source(base, logDir, snapshot, false, Dialect.of(this, chosen).label);
    }
  }

  /**
   * A channel directory (spec 10: the base layout with {@code data/cursors/}, no snapshot or
   * metadata): its records are opaque messages, not deltas. The CLI's {@code _is_channel} rule.
   */
  static boolean isChannel(String base) {
    return base != null && Files.isDirectory(Paths.get(base, "data", "cursors"));
  }

  static final Pattern SEGMENT_NAME = Pattern.compile("^[0-9]{19}\\.log(\\.z)?$");

  static List<String> paths(Map<String, String> options) {
    Map<String, String> hosts = Planner.locations(options);
    List<String> items = new ArrayList<>();
    String path = Options.get(options, "path");
    if (path != null && !path.isEmpty()) {
      items.add(path);
    } else {
      String many = Options.get(options, "paths");
      if (many != null && !many.isEmpty()) {
        try {
          for (Object o : new ObjectMapper().readValue(many, List.class)) {
            items.add(String.valueOf(o));
          }
        } catch (IOException e) {
          items.add(many);
        }
      }
    }
    if (items.isEmpty()) {
      throw new IllegalArgumentException(
          "tflux: no path given (use .load(PATH) or .option('path', PATH))");
    }
    List<String> out = new ArrayList<>();
    for (String item : items) {
      for (String p : item.split(",")) {
        p = p.trim();
        if (p.isEmpty()) {
          continue;
        }
        if (p.equals("~") || p.startsWith("~/")) {
          p = System.getProperty("user.home") + p.substring(1);
        }
        if (hasMagic(p)) {
          List<String> matches = glob(p);
          if (matches.isEmpty()) {
            throw new IllegalArgumentException("tflux: no path matches '" + p + "'");
          }
          out.addAll(matches);
        } else {
          boolean elsewhere = hosts.containsKey(
              Paths.get(p).toAbsolutePath().normalize().toString());
          if (!elsewhere && !Files.exists(Paths.get(p))) {
            throw new IllegalArgumentException("tflux: '" + p + "' does not exist");
          }
          out.add(p);
        }
      }
    }
    return out;
  }

  static boolean hasMagic(String p) {
    return p.indexOf('*') >= 0 || p.indexOf('?') >= 0 || p.indexOf('[') >= 0;
  }

  /** Python's glob.glob for absolute or relative patterns (sorted; hidden names need a dot). */
  static List<String> glob(String pattern) {
    boolean absolute = pattern.startsWith("/");
    String[] parts = pattern.split("/");
    List<String> current = new ArrayList<>();
    current.add(absolute ? "/" : "");
    for (String part : parts) {
      if (part.isEmpty()) {
        continue;
      }
      List<String> next = new ArrayList<>();
      for (String dir : current) {
        if (!hasMagic(part)) {
          String p = join(dir, part);
          if (Files.exists(Paths.get(p.isEmpty() ? "." : p))) {
            next.add(p);
          }
          continue;
        }
        PathMatcher m = FileSystems.getDefault().getPathMatcher("glob:" + part);
        Path d = Paths.get(dir.isEmpty() ? "." : dir);
        if (!Files.isDirectory(d)) {
          continue;
        }
        List<String> names = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(d)) {
          for (Path e : ds) {
            String name = e.getFileName().toString();
            if (name.startsWith(".") && !part.startsWith(".")) {
              continue;
            }
            if (m.matches(e.getFileName())) {
              names.add(name);
            }
          }
        } catch (IOException e) {
          continue;
        }
        Collections.sort(names);
        for (String name : names) {
          next.add(join(dir, name));
        }
      }
      current = next;
    }
    Collections.sort(current);
    return current;
  }

  private static String join(String dir, String name) {
    if (dir.isEmpty()) {
      return name;
    }
    return dir.endsWith("/") ? dir + name : dir + "/" + name;
  }

  /** Fails a task that runs where a remote source is not (the scheduler then retries it). */
  static void checkHere(Source src) {
    if (src.remote && !Files.isDirectory(Paths.get(src.base))) {
      String host;
      try {
        host = java.net.InetAddress.getLocalHost().getHostName();
      } catch (IOException e) {
        host = "this host";
      }
      throw new IllegalStateException("tflux: " + src.base + " does not exist on " + host
          + " (the locations option names the host that holds it)");
    }
  }

  static List<Source> resolve(Map<String, String> options) {
    Map<String, Source> sources = new LinkedHashMap<>();
    for (String raw : paths(options)) {
      Path p = Paths.get(raw).toAbsolutePath().normalize();
      Source src;
      if (!Files.exists(p)) {
        // A base directory on another node (see the locations option).
        Path data = p.resolve("data");
        src = new Source(p.toString(), data.resolve("log").toString(),
            data.resolve("tflux.snapshot").toString(), true, null);
      } else if (Files.isRegularFile(p)) {
        Path parent = p.getParent();
        if (parent.getFileName() != null && parent.getFileName().toString().equals("data")
            && parent.getParent() != null) {
          Path base = parent.getParent();
          Path log = parent.resolve("log");
          src = new Source(base.toString(), Files.isDirectory(log) ? log.toString() : null,
              p.toString());
        } else {
          src = new Source(parent.toString(), null, p.toString());
        }
      } else if (Files.isDirectory(p.resolve("data"))) {
        Path log = p.resolve("data").resolve("log");
        Path snap = p.resolve("data").resolve("tflux.snapshot");
        src = new Source(p.toString(), Files.isDirectory(log) ? log.toString() : null,
            Files.isRegularFile(snap) ? snap.toString() : null);
      } else {
        Path parent = p.getParent();
        boolean inBase = p.getFileName() != null && p.getFileName().toString().equals("log")
            && parent != null && parent.getFileName() != null
            && parent.getFileName().toString().equals("data") && parent.getParent() != null;
        if (inBase) {
          Path base = parent.getParent();
          Path snap = parent.resolve("tflux.snapshot");
          src = new Source(base.toString(), p.toString(),
              Files.isRegularFile(snap) ? snap.toString() : null);
        } else {
          src = new Source(p.toString(), p.toString(), null);
        }
      }
      if (!sources.containsKey(src.base)) {
        try {
          sources.put(src.base, src.detected(Dialect.parse(options.get("dialect"))));
        } catch (IOException e) {
          throw new java.io.UncheckedIOException("tflux: cannot read " + src.base, e);
        }
      }
    }
    return new ArrayList<>(sources.values());
  }

  /**
   * Segment file names of {@code logDir} in LSN order (other names are ignored); a compressed
   * {@code .log.z} wins over a plain {@code .log} of the same LSN (readers look for it first).
   */
  static List<String> segmentNames(String logDir) {
    List<String> names = new ArrayList<>();
    try (DirectoryStream<Path> ds = Files.newDirectoryStream(Paths.get(logDir))) {
      for (Path e : ds) {
        String n = e.getFileName().toString();
        if (SEGMENT_NAME.matcher(n).matches()) {
          names.add(n);
        }
      }
    } catch (java.nio.file.NoSuchFileException e) {
      return names;
    } catch (IOException e) {
      throw new java.io.UncheckedIOException("tflux: cannot list " + logDir, e);
    }
    Collections.sort(names);
    List<String> out = new ArrayList<>();
    for (String n : names) {
      if (!out.isEmpty() && out.get(out.size() - 1).regionMatches(0, n, 0, 19)) {
        out.set(out.size() - 1, n); // "X.log.z" sorts after "X.log"
      } else {
        out.add(n);
      }
    }
    return out;
  }

  /** A segment name's first LSN (19 digits that must fit an Int64, as the core's parse). */
  static long startLsn(String name) {
    return Long.parseLong(name.substring(0, 19));
  }
}
