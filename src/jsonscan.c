/* One linear pass over JSON text before jsonlite parses it (R/artifact-read.R,
 * parse_json_strict()).
 *
 * Note: why in C. The pass was regular expressions over the whole text (PCRE): on a long
 * JSON string the match ran out of PCRE's JIT stack and R only warned, skipping the pass
 * (integers past 2^53 were then read as doubles: prober21c F6); their cost per byte made a
 * 36-60 MB program.json take 36-53 s (F7); and the nesting depth was checked only after
 * jsonlite and a recursive walk had read the document, so 20,000 levels gave R's C-stack
 * error (F5). Here one pass, outside strings and inside them, finds what the reader
 * refuses and where the big integers are:
 *   - a control byte (below 0x20, but tab, LF and CR), anywhere;
 *   - a '/' outside strings (a comment: jsonlite allows them, Python does not);
 *   - nesting past `depth` containers;
 *   - an integer of more than 4300 digits (Python's limit);
 *   - the escapes \u0000 (R strings cannot hold it), \u001f (the big-integer tag) and a
 *     lone surrogate;
 * and it returns the text with each integer of at least 10 digits and magnitude 2^31 or
 * more written as the string "\u001ftbint:DIGITS" (tag_big_ints()), or NULL where the
 * text has none. A fault comes back as a numeric vector c(code, byte offset, number).
 * An unterminated string or other broken JSON is left to jsonlite to report.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <R.h>
#include <Rinternals.h>

enum { FAULT_SLASH = 1, FAULT_DEPTH = 2, FAULT_DIGITS = 3, FAULT_NUL = 4, FAULT_TAG = 5,
       FAULT_SURROGATE = 6, FAULT_CONTROL = 7 };

static SEXP fault(int code, R_xlen_t at, double number) {
  SEXP out = PROTECT(allocVector(REALSXP, 3));
  REAL(out)[0] = code;
  REAL(out)[1] = (double) at;
  REAL(out)[2] = number;
  UNPROTECT(1);
  return out;
}

static int hex4(const unsigned char *p, R_xlen_t left) {
  int v = 0;
  if (left < 4) return -1;
  for (int i = 0; i < 4; i++) {
    int c = p[i], d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

/* Whether the digits p[0..n) (no sign) are 2^31 or more, with at least 10 digits written. */
static int is_big(const unsigned char *p, R_xlen_t n) {
  if (n < 10) return 0;
  while (n > 1 && *p == '0') { p++; n--; }
  if (n != 10) return n > 10;
  return memcmp(p, "2147483648", 10) >= 0;
}

SEXP tb_json_scan(SEXP bytes, SEXP depth_limit) {
  const unsigned char *s = RAW(bytes);
  R_xlen_t n = XLENGTH(bytes), i = 0, nbig = 0, cap = 0, extra = 0;
  R_xlen_t *big = NULL; /* start, end of each big integer */
  int depth = 0, limit = asInteger(depth_limit);
  SEXP out = R_NilValue;
  while (i < n) {
    unsigned char c = s[i];
    if (c == '"') {
      i++;
      while (i < n && s[i] != '"') {
        if (s[i] < 0x20) { free(big); return fault(FAULT_CONTROL, i, s[i]); }
        if (s[i] != '\\') { i++; continue; }
        if (i + 1 < n && s[i + 1] == 'u') {
          int v = hex4(s + i + 2, n - i - 2);
          if (v == 0) { free(big); return fault(FAULT_NUL, i, 0); }
          if (v == 0x1f) { free(big); return fault(FAULT_TAG, i, 0); }
          if (v >= 0xd800 && v <= 0xdbff) {
            int w = (i + 7 < n && s[i + 6] == '\\' && s[i + 7] == 'u') ?
              hex4(s + i + 8, n - i - 8) : -1;
            if (w < 0xdc00 || w > 0xdfff) { free(big); return fault(FAULT_SURROGATE, i, 0); }
            i += 12;
            continue;
          }
          if (v >= 0xdc00 && v <= 0xdfff) { free(big); return fault(FAULT_SURROGATE, i, 0); }
          i += v < 0 ? 2 : 6;
          continue;
        }
        i += 2;
      }
      i++; /* the closing quote (past the end where there is none: jsonlite says so) */
      continue;
    }
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
      free(big);
      return fault(FAULT_CONTROL, i, c);
    }
    if (c == '/') { free(big); return fault(FAULT_SLASH, i, 0); }
    if (c == '[' || c == '{') {
      if (++depth > limit) { free(big); return fault(FAULT_DEPTH, i, depth); }
      i++;
      continue;
    }
    if (c == ']' || c == '}') { depth--; i++; continue; }
    if (c == '-' || (c >= '0' && c <= '9')) {
      R_xlen_t start = i, j = i;
      int integer = 1;
      while (j < n && ((s[j] >= '0' && s[j] <= '9') || s[j] == '-' || s[j] == '+' ||
                       s[j] == '.' || s[j] == 'e' || s[j] == 'E')) {
        if (!(s[j] >= '0' && s[j] <= '9') && !(j == start && s[j] == '-')) integer = 0;
        j++;
      }
      R_xlen_t digits = j - start - (s[start] == '-');
      if (integer && digits > 0) {
        if (digits > 4300) { free(big); return fault(FAULT_DIGITS, start, (double) digits); }
        if (is_big(s + j - digits, digits)) {
          if (nbig == cap) {
            cap = cap ? 2 * cap : 64;
            R_xlen_t *grown = realloc(big, 2 * cap * sizeof *big);
            if (!grown) { free(big); error("out of memory scanning JSON"); }
            big = grown;
          }
          big[2 * nbig] = start;
          big[2 * nbig + 1] = j;
          nbig++;
        }
      }
      i = j;
      continue;
    }
    i++;
  }
  if (nbig) {
    static const char open[] = "\"\\u001ftbint:";
    size_t lo = sizeof open - 1;
    extra = nbig * (R_xlen_t) (lo + 1);
    if (n + extra > INT_MAX) { free(big); error("JSON text too long to tag"); }
    char *buf = R_alloc(n + extra, 1), *w = buf;
    R_xlen_t from = 0;
    for (R_xlen_t k = 0; k < nbig; k++) {
      R_xlen_t a = big[2 * k], b = big[2 * k + 1];
      memcpy(w, s + from, a - from); w += a - from;
      memcpy(w, open, lo); w += lo;
      memcpy(w, s + a, b - a); w += b - a;
      *w++ = '"';
      from = b;
    }
    memcpy(w, s + from, n - from); w += n - from;
    free(big);
    out = PROTECT(allocVector(STRSXP, 1));
    SET_STRING_ELT(out, 0, mkCharLenCE(buf, (int) (w - buf), CE_UTF8));
    UNPROTECT(1);
    return out;
  }
  free(big);
  return out;
}
