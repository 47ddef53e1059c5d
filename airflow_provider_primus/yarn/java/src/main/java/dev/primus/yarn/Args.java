package dev.primus.yarn;

import java.util.HashMap;
import java.util.Map;

/** `--flag value` pairs; an unknown shape is an error naming it. */
final class Args {
  private final Map<String, String> values = new HashMap<>();

  static Args parse(String[] argv) {
    Args a = new Args();
    for (int k = 0; k < argv.length; k++) {
      if (!argv[k].startsWith("--") || k + 1 >= argv.length) {
        throw new IllegalArgumentException("expected --flag value pairs, got " + argv[k]);
      }
      a.values.put(argv[k], argv[++k]);
    }
    return a;
  }

  String get(String flag, String fallback) {
    String v = values.getOrDefault(flag, fallback);
    if (v == null) {
      throw new IllegalArgumentException(flag + " is required");
    }
    return v;
  }

  /** The flag's value, or null when it was not given (an optional flag). */
  String optional(String flag) {
    return values.get(flag);
  }
}
