/* `x[i, j]` and `x[i, j] <- value` in C for the common indices: positions, `a:b` ranges and
 * empty (all), read from the call as R/indexing.R reads them.
 *
 * Note: what is left to R. An index C takes is a missing argument, a number, a variable, a
 * negated number, or `a:b` of those; anything else (`N`, `..`, `a:b:s`, calls, vectors,
 * tensors, masks, NULL/newaxis, 0, `drop = FALSE`, more indices than dimensions) answers
 * `.tb_fallback` before any Python object is made, and R/indexing.R does the whole call.
 * Variables are the only expressions evaluated here, and evaluating one again in R has no
 * effect, so a fallback never runs user code twice.
 */
#include <string.h>

#include "convert.h"

enum { IX_ALL, IX_INT, IX_RANGE };

typedef struct {
  int kind;
  long long a, b;
} Ix;

static int is_sym(SEXP e, const char *name) {
  return TYPEOF(e) == SYMSXP && strcmp(CHAR(PRINTNAME(e)), name) == 0;
}

/* A number, a variable (not `N` or `..`) or `-number`: its value; NULL otherwise. */
static SEXP simple_value(SEXP e, SEXP env) {
  switch (TYPEOF(e)) {
  case REALSXP:
  case INTSXP: return e;
  case SYMSXP:
    if (e == R_MissingArg || is_sym(e, "N") || is_sym(e, "..")) return NULL;
    return Rf_eval(e, env);
  case LANGSXP:
    if (is_sym(CAR(e), "-") && Rf_length(e) == 2 &&
        (TYPEOF(CADR(e)) == REALSXP || TYPEOF(CADR(e)) == INTSXP))
      return Rf_eval(e, env);
    return NULL;
  default: return NULL;
  }
}

/* One index; 0 where R must read it. */
static int parse_one(SEXP e, SEXP env, Ix *ix) {
  if (e == R_MissingArg) {
    ix->kind = IX_ALL;
    return 1;
  }
  if (TYPEOF(e) == LANGSXP && is_sym(CAR(e), ":") && Rf_length(e) == 3) {
    SEXP lhs = CADR(e), rhs = CADDR(e);
    if (TYPEOF(lhs) == LANGSXP && is_sym(CAR(lhs), ":")) return 0; /* a:b:s */
    SEXP a = simple_value(lhs, env);
    if (a == NULL) return 0;
    PROTECT(a);
    SEXP b = simple_value(rhs, env);
    UNPROTECT(1);
    if (b == NULL) return 0;
    PROTECT(b);
    int ok = whole_int(a, &ix->a) && whole_int(b, &ix->b) && ix->a != 0 && ix->b != 0;
    UNPROTECT(1);
    ix->kind = IX_RANGE;
    return ok;
  }
  SEXP v = simple_value(e, env);
  if (v == NULL) return 0;
  ix->kind = IX_INT;
  return whole_int(v, &ix->a) && ix->a != 0;
}

static PyObject *long_or_none(long long v, int none) {
  if (none) {
    py.IncRef(py.None);
    return py.None;
  }
  return py.LongFromLongLong(v);
}

/* The Python key part of one index (as py_key_part() and range_index() make it). */
static PyObject *key_part(const Ix *ix) {
  if (ix->kind == IX_INT) return py.LongFromLongLong(ix->a > 0 ? ix->a - 1 : ix->a);
  if (ix->kind == IX_ALL) return py.SliceNew(NULL, NULL, NULL);
  /* `end` is included; -1 (the last) means "to the end". */
  PyObject *start = long_or_none(ix->a > 0 ? ix->a - 1 : ix->a, 0);
  PyObject *stop = long_or_none(ix->b > 0 ? ix->b : ix->b + 1, ix->b == -1);
  PyObject *slice = (start && stop) ? py.SliceNew(start, stop, torch_.one) : NULL;
  py_decref(start);
  py_decref(stop);
  return slice;
}

/* tb_index(x, call, env, drop, value): `x[...]` (value = list()) or `x[...] <- value`
 * (value = list(value)) for the call as written (sys.call()) in `env`. */
SEXP tb_index(SEXP x, SEXP call, SEXP env, SEXP drop, SEXP value) {
  int set = Rf_xlength(value) == 1;
  PyObject *t = tensor_of(x);
  if (!c_path_on() || t == NULL || TYPEOF(call) != LANGSXP) return sentinel_fallback;
  if (TYPEOF(drop) != LGLSXP || Rf_xlength(drop) != 1 || LOGICAL(drop)[0] != TRUE)
    return sentinel_fallback;
  const char *skip = set ? "value" : "drop";
  int n = 0;
  for (SEXP p = CDDR(call); p != R_NilValue; p = CDR(p)) {
    if (TAG(p) != R_NilValue) {
      if (strcmp(CHAR(PRINTNAME(TAG(p))), skip) == 0) continue;
      return sentinel_fallback;
    }
    n++;
  }
  if (n == 0 || n > 16) return sentinel_fallback;
  Ix ix[16];
  int k = 0;
  for (SEXP p = CDDR(call); p != R_NilValue; p = CDR(p)) {
    if (TAG(p) != R_NilValue) continue;
    if (!parse_one(CAR(p), env, &ix[k++])) return sentinel_fallback;
  }
  PyObject *val = NULL;
  if (set) {
    SEXP v = VECTOR_ELT(value, 0);
    if (py_field_of(v, "torch_sym_int") != NULL) return sentinel_fallback;
    PyObject *tv = tensor_of(v);
    if (tv == NULL && (TYPEOF(v) == VECSXP || Rf_xlength(v) != 1)) return sentinel_fallback;
  }
  GILState gil = py.GILEnsure();
  /* More indices than dimensions: R's message says so (R/indexing.R). */
  PyObject *ndim = py.GetAttr(t, torch_.s_ndim);
  int overflow = 0;
  long long nd = ndim == NULL ? -1 : py.LongAsLongLongAndOverflow(ndim, &overflow);
  py_decref(ndim);
  if (ndim == NULL || overflow || nd < n) {
    if (ndim == NULL) {
      store_error();
      py.GILRelease(gil);
      return sentinel_error;
    }
    py.GILRelease(gil);
    return sentinel_fallback;
  }
  if (set && scalar_to_py(VECTOR_ELT(value, 0), &val) != CONV_OK) {
    py.GILRelease(gil);
    return sentinel_fallback;
  }
  PyObject *key = py.TupleNew(n);
  int ok = key != NULL;
  for (int i = 0; ok && i < n; i++) {
    PyObject *part = key_part(&ix[i]);
    if (part == NULL) ok = 0;
    else py.TupleSetItem(key, i, part); /* steals */
  }
  SEXP out = sentinel_error;
  if (ok && set) {
    if (py.SetItem(t, key, val) == 0) out = x;
    else store_error();
  } else if (ok) {
    PyObject *result = py.GetItem(t, key);
    if (result != NULL) out = wrap_result(result); /* steals */
    else store_error();
  } else {
    store_error();
  }
  py_decref(key);
  py_decref(val);
  py.GILRelease(gil);
  return out;
}
