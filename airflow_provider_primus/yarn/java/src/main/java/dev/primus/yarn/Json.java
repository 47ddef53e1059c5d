package dev.primus.yarn;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The JSON the ApplicationMaster's API speaks, without a library: on a real cluster the AM runs on
 * yarn.application.classpath, whose Jackson (shaded or not, of some version) we must not depend on.
 * Objects parse to LinkedHashMap, arrays to ArrayList, numbers to Long or Double.
 */
final class Json {
  private final String s;
  private int i;

  private Json(String s) {
    this.s = s;
  }

  static Object parse(String text) {
    Json p = new Json(text);
    p.ws();
    Object v = p.value();
    p.ws();
    if (p.i != p.s.length()) {
      throw p.error("trailing characters");
    }
    return v;
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> object(String text) {
    Object v = parse(text.isEmpty() ? "{}" : text);
    if (!(v instanceof Map)) {
      throw new IllegalArgumentException("expected a JSON object");
    }
    return (Map<String, Object>) v;
  }

  private IllegalArgumentException error(String what) {
    return new IllegalArgumentException("invalid JSON at offset " + i + ": " + what);
  }

  private void ws() {
    while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
      i++;
    }
  }

  private Object value() {
    if (i >= s.length()) {
      throw error("unexpected end");
    }
    char c = s.charAt(i);
    switch (c) {
      case '{':
        return obj();
      case '[':
        return arr();
      case '"':
        return str();
      case 't':
        return lit("true", Boolean.TRUE);
      case 'f':
        return lit("false", Boolean.FALSE);
      case 'n':
        return lit("null", null);
      default:
        return num();
    }
  }

  private Object lit(String word, Object v) {
    if (!s.startsWith(word, i)) {
      throw error("expected " + word);
    }
    i += word.length();
    return v;
  }

  private Map<String, Object> obj() {
    Map<String, Object> m = new LinkedHashMap<>();
    i++;
    ws();
    if (i < s.length() && s.charAt(i) == '}') {
      i++;
      return m;
    }
    while (true) {
      ws();
      if (i >= s.length() || s.charAt(i) != '"') {
        throw error("expected a key");
      }
      String k = str();
      ws();
      if (i >= s.length() || s.charAt(i) != ':') {
        throw error("expected ':'");
      }
      i++;
      ws();
      m.put(k, value());
      ws();
      if (i < s.length() && s.charAt(i) == ',') {
        i++;
        continue;
      }
      if (i < s.length() && s.charAt(i) == '}') {
        i++;
        return m;
      }
      throw error("expected ',' or '}'");
    }
  }

  private List<Object> arr() {
    List<Object> a = new ArrayList<>();
    i++;
    ws();
    if (i < s.length() && s.charAt(i) == ']') {
      i++;
      return a;
    }
    while (true) {
      ws();
      a.add(value());
      ws();
      if (i < s.length() && s.charAt(i) == ',') {
        i++;
        continue;
      }
      if (i < s.length() && s.charAt(i) == ']') {
        i++;
        return a;
      }
      throw error("expected ',' or ']'");
    }
  }

  private String str() {
    StringBuilder b = new StringBuilder();
    i++;
    while (i < s.length()) {
      char c = s.charAt(i++);
      if (c == '"') {
        return b.toString();
      }
      if (c != '\\') {
        b.append(c);
        continue;
      }
      if (i >= s.length()) {
        break;
      }
      char e = s.charAt(i++);
      switch (e) {
        case 'n': b.append('\n'); break;
        case 't': b.append('\t'); break;
        case 'r': b.append('\r'); break;
        case 'b': b.append('\b'); break;
        case 'f': b.append('\f'); break;
        case 'u':
          if (i + 4 > s.length()) {
            throw error("short \\u escape");
          }
          b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
          i += 4;
          break;
        default: b.append(e);
      }
    }
    throw error("unterminated string");
  }

  private Object num() {
    int start = i;
    while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) {
      i++;
    }
    String t = s.substring(start, i);
    if (t.isEmpty()) {
      throw error("unexpected character");
    }
    try {
      if (t.contains(".") || t.contains("e") || t.contains("E")) {
        return Double.parseDouble(t);
      }
      return Long.parseLong(t);
    } catch (NumberFormatException ex) {
      throw error("bad number " + t);
    }
  }

  static String write(Object v) {
    StringBuilder b = new StringBuilder();
    write(b, v);
    return b.toString();
  }

  private static void write(StringBuilder b, Object v) {
    if (v == null) {
      b.append("null");
    } else if (v instanceof String) {
      quote(b, (String) v);
    } else if (v instanceof Number || v instanceof Boolean) {
      b.append(v);
    } else if (v instanceof Map) {
      b.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
        if (!first) {
          b.append(',');
        }
        first = false;
        quote(b, String.valueOf(e.getKey()));
        b.append(':');
        write(b, e.getValue());
      }
      b.append('}');
    } else if (v instanceof Iterable) {
      b.append('[');
      boolean first = true;
      for (Object o : (Iterable<?>) v) {
        if (!first) {
          b.append(',');
        }
        first = false;
        write(b, o);
      }
      b.append(']');
    } else {
      quote(b, v.toString());
    }
  }

  private static void quote(StringBuilder b, String s) {
    b.append('"');
    for (int k = 0; k < s.length(); k++) {
      char c = s.charAt(k);
      switch (c) {
        case '"': b.append("\\\""); break;
        case '\\': b.append("\\\\"); break;
        case '\n': b.append("\\n"); break;
        case '\r': b.append("\\r"); break;
        case '\t': b.append("\\t"); break;
        default:
          if (c < 0x20) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
      }
    }
    b.append('"');
  }

  static Map<String, Object> map(Object... kv) {
    Map<String, Object> m = new LinkedHashMap<>();
    for (int k = 0; k + 1 < kv.length; k += 2) {
      m.put((String) kv[k], kv[k + 1]);
    }
    return m;
  }
}
