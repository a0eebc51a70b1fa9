/* `x[i, j]` and `x[i, j] <- value` in C for the common indices: positions, `a:b` ranges and
 * empty (all), read from the call as R/indexing.R reads them.
 *
 * Note: what is left to R. An index C takes is a missing argument, a number, a variable, a
 * pure expression of those (arithmetic, `v[[k]]`, length(), ...: pure_expr()), `a:b` of
 * those, or any other expression without `N`, `..` or `:` (`x[f(i), ]`, `x[order(v)[1], ]`)
 * whose value is one number or a tensor of positions; anything else (`N`, `..`, `a:b:s`,
 * vectors, masks, NULL/newaxis, 0, `drop = FALSE`, more indices than dimensions) answers
 * `.tb_fallback` before any Python object is made, and R/indexing.R does the whole call.
 * Variables and pure expressions are evaluated here, and evaluating one again in R has no
 * effect. Another expression may have effects (it calls user code), so it is evaluated by
 * forcing the promise of the argument (tb_index_dots(), see the note there): R keeps the
 * value, and a fallback reads the values of forced arguments (tb_dots_forced()) instead of
 * evaluating them again. So a fallback never runs user code twice.
 */
#include <string.h>

#include "convert.h"

enum { IX_ALL, IX_INT, IX_RANGE, IX_TENSOR };

typedef struct {
  int kind;
  long long a, b;
  PyObject *tensor; /* IX_TENSOR: borrowed from the R tensor the index evaluated to */
} Ix;

static int is_sym(SEXP e, const char *name) {
  return TYPEOF(e) == SYMSXP && strcmp(CHAR(PRINTNAME(e)), name) == 0;
}

/* Calls an index may be computed with here: arithmetic and reading an element, which
 * have no effect beyond their value, so that R evaluating the index again after a
 * fallback changes nothing (see the note at the top). */
static const char *pure_calls[] = {"+", "-", "*", "(", "[[", "%/%", "%%", "length", "nrow",
                                   "ncol", "min", "max", NULL};

/* An expression of numbers, variables (not `N` or `..`, which only R's reading knows) and
 * the calls above. */
static int pure_expr(SEXP e, int depth) {
  if (depth > 8) return 0;
  switch (TYPEOF(e)) {
  case REALSXP:
  case INTSXP:
  case STRSXP: return 1; /* a name inside `[[` */
  case SYMSXP: return e != R_MissingArg && !is_sym(e, "N") && !is_sym(e, "..");
  case LANGSXP: {
    if (TYPEOF(CAR(e)) != SYMSXP) return 0;
    int known = 0;
    for (const char **c = pure_calls; *c != NULL && !known; c++) known = is_sym(CAR(e), *c);
    if (!known) return 0;
    for (SEXP a = CDR(e); a != R_NilValue; a = CDR(a))
      if (TAG(a) != R_NilValue || !pure_expr(CAR(a), depth + 1)) return 0;
    return 1;
  }
  default: return 0;
  }
}

/* Whether `e` mentions `N` or `..` (which only R's reading of an index knows) anywhere. */
static int mentions_r_only(SEXP e, int depth) {
  if (depth > 64) return 1;
  if (TYPEOF(e) == SYMSXP) return is_sym(e, "N") || is_sym(e, "..");
  if (TYPEOF(e) != LANGSXP) return 0;
  for (SEXP a = e; a != R_NilValue; a = CDR(a))
    if (mentions_r_only(CAR(a), depth + 1)) return 1;
  return 0;
}

/* A call that C may evaluate once by forcing its promise: not `a:b` (read as a range),
 * nothing that only R's reading knows. */
static int forceable(SEXP e) {
  return TYPEOF(e) == LANGSXP && !is_sym(CAR(e), ":") && !mentions_r_only(e, 0);
}

/* A number, or a variable (not `N` or `..`) or a pure expression (pure_expr()) of them:
 * its value; NULL otherwise. */
static SEXP simple_value(SEXP e, SEXP env) {
  switch (TYPEOF(e)) {
  case REALSXP:
  case INTSXP: return e;
  case SYMSXP:
    if (e == R_MissingArg || is_sym(e, "N") || is_sym(e, "..") || TYPEOF(env) != ENVSXP)
      return NULL;
    return Rf_eval(e, env);
  case LANGSXP:
    if (TYPEOF(env) != ENVSXP || !pure_expr(e, 0)) return NULL;
    return Rf_eval(e, env);
  default: return NULL;
  }
}

/* One index; 0 where R must read it. `prom`: the argument's promise (R_NilValue when there
 * is none), forced for an expression with effects (forceable()). */
static int parse_one(SEXP e, SEXP env, SEXP prom, Ix *ix) {
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
  int forced = 0;
  if (v == NULL && TYPEOF(prom) == PROMSXP && TYPEOF(env) == ENVSXP && forceable(e)) {
    v = Rf_eval(prom, env); /* once: R keeps the value in the promise */
    forced = 1;
  }
  if (v == NULL) return 0;
  if (TYPEOF(v) == VECSXP) {
    /* A variable, or a forced promise, holding a tensor of positions (checked in
     * index_impl()): the variable or the promise keeps the tensor alive for the call. */
    if ((TYPEOF(e) != SYMSXP && !forced) || (ix->tensor = tensor_of(v)) == NULL) return 0;
    ix->kind = IX_TENSOR;
    return 1;
  }
  ix->kind = IX_INT;
  return whole_int(v, &ix->a) && ix->a != 0;
}

/* A 1-d tensor of whole numbers (other index tensors mean other things: R decides). */
static int plain_positions(PyObject *t) {
  if (tensor_dtype_kind(t) != 0) return 0;
  PyObject *ndim = py.GetAttr(t, torch_.s_ndim);
  if (ndim == NULL) return 0;
  int overflow = 0;
  long long nd = py.LongAsLongLongAndOverflow(ndim, &overflow);
  py.DecRef(ndim);
  return !overflow && nd == 1;
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
  if (ix->kind == IX_ALL || ix->kind == IX_TENSOR) return py.SliceNew(NULL, NULL, NULL);
  /* `end` is included; -1 (the last) means "to the end". */
  PyObject *start = long_or_none(ix->a > 0 ? ix->a - 1 : ix->a, 0);
  PyObject *stop = long_or_none(ix->b > 0 ? ix->b : ix->b + 1, ix->b == -1);
  PyObject *slice = (start && stop) ? py.SliceNew(start, stop, torch_.one) : NULL;
  py_decref(start);
  py_decref(stop);
  return slice;
}

/* rbridge.select_positions(t, dim, positions) as a Python call; steals `t`. */
static PyObject *select_positions_py(PyObject *t, int dim, PyObject *positions) {
  PyObject *d = py.LongFromLongLong(dim), *args = NULL, *r = NULL;
  if (d != NULL && (args = py.TupleNew(3)) != NULL) {
    py.IncRef(t);
    py.TupleSetItem(args, 0, t);
    py.TupleSetItem(args, 1, d);
    d = NULL;
    py.IncRef(positions);
    py.TupleSetItem(args, 2, positions);
    r = py.Call(torch_.select_positions, args, NULL);
  }
  py_decref(args);
  py_decref(d);
  py.DecRef(t);
  return r;
}

/* rbridge.select_positions(t, dim, positions): index_select's result, read as
 * t[:, ..., positions] so that a negative position counts from the end, as writing does
 * (index_select refuses it); steals `t`. The read of int64 and int32 positions is made
 * here, with the same key (two a training step: the Python function's frame cost ~2 us
 * a call); where it fails, or for other dtypes, the function runs, which raises its own
 * message (positions out of bounds named in R terms). */
static PyObject *index_select(PyObject *t, int dim, PyObject *positions) {
  PyObject *dtype = py.GetAttr(positions, torch_.s_dtype);
  int plain = dtype == torch_.dtype_int64 || dtype == torch_.dtype_int32;
  py_decref(dtype);
  if (dtype == NULL) py.ErrClear();
  PyObject *key = plain ? py.TupleNew(dim + 1) : NULL, *r = NULL;
  if (key != NULL) {
    for (int i = 0; i < dim; i++) {
      py.IncRef(torch_.slice_all);
      py.TupleSetItem(key, i, torch_.slice_all); /* steals */
    }
    py.IncRef(positions);
    py.TupleSetItem(key, dim, positions);
    r = py.GetItem(t, key);
    py.DecRef(key);
  }
  if (r != NULL) {
    py.DecRef(t);
    return r;
  }
  if (py.ErrOccurred() != NULL) py.ErrClear();
  return select_positions_py(t, dim, positions);
}

/* The index arguments of one `[` call: each one's expression and the environment it is
 * evaluated in. */
typedef struct {
  int n;
  SEXP expr[16], env[16], prom[16];
} IndexArgs;

static SEXP index_impl(SEXP x, const IndexArgs *args, SEXP drop, SEXP value);

/* tb_index(x, call, env, drop, value): `x[...]` (value = NULL) or `x[...] <- value`
 * (value = list(value)) for the call as written (sys.call()) in `env`. */
SEXP tb_index(SEXP x, SEXP call, SEXP env, SEXP drop, SEXP value) {
  int set = TYPEOF(value) == VECSXP && Rf_xlength(value) == 1;
  if (TYPEOF(call) != LANGSXP) return sentinel_fallback;
  const char *skip = set ? "value" : "drop";
  IndexArgs args = {0};
  for (SEXP p = CDDR(call); p != R_NilValue; p = CDR(p)) {
    if (TAG(p) != R_NilValue) {
      if (strcmp(CHAR(PRINTNAME(TAG(p))), skip) == 0) continue;
      return sentinel_fallback;
    }
    if (args.n == 16) return sentinel_fallback;
    args.expr[args.n] = CAR(p);
    args.env[args.n] = env;
    args.prom[args.n] = R_NilValue; /* nothing to keep a value in: calls stay R's */
    args.n++;
  }
  return index_impl(x, &args, drop, value);
}

/* tb_index_dots(x, rho, drop, value): the same, with the indices read from `...` of the
 * method's frame `rho`. Note: why this works. S3 dispatch of `[` (and `[<-`) passes each
 * index as a promise of its expression in the caller's environment, so the expressions
 * and environment that sys.call() and parent.frame() would give are there already, for
 * two R calls less. A promise that ran already, or one whose environment is gone, leaves
 * the call to tb_index (R's sys.call() path). */
SEXP tb_index_dots(SEXP x, SEXP rho, SEXP drop, SEXP value) {
  if (TYPEOF(rho) != ENVSXP) return sentinel_fallback;
  SEXP dots = Rf_findVarInFrame(rho, R_DotsSymbol);
  if (TYPEOF(dots) != DOTSXP) return sentinel_fallback;
  IndexArgs args = {0};
  for (SEXP p = dots; p != R_NilValue; p = CDR(p)) {
    if (TAG(p) != R_NilValue || args.n == 16) return sentinel_fallback;
    SEXP e = CAR(p), env = R_NilValue, prom = R_NilValue;
    if (TYPEOF(e) == PROMSXP) {
      if (PRVALUE(e) != R_UnboundValue || TYPEOF(PRENV(e)) != ENVSXP) return sentinel_fallback;
      prom = e;
      env = PRENV(e);
      e = R_PromiseExpr(e);
    } else if (e != R_MissingArg && TYPEOF(e) != REALSXP && TYPEOF(e) != INTSXP) {
      return sentinel_fallback; /* a value passed as it is (do.call()): R decides */
    }
    args.expr[args.n] = e;
    args.env[args.n] = env;
    args.prom[args.n] = prom;
    args.n++;
  }
  return index_impl(x, &args, drop, value);
}

static SEXP index_impl(SEXP x, const IndexArgs *args, SEXP drop, SEXP value) {
  int set = TYPEOF(value) == VECSXP && Rf_xlength(value) == 1;
  PyObject *t = tensor_of(x);
  if (!c_path_on() || t == NULL) return sentinel_fallback;
  if (TYPEOF(drop) != LGLSXP || Rf_xlength(drop) != 1 || LOGICAL(drop)[0] != TRUE)
    return sentinel_fallback;
  int n = args->n;
  if (n == 0) return sentinel_fallback;
  Ix ix[16];
  int at = -1;
  for (int k = 0; k < n; k++) {
    if (!parse_one(args->expr[k], args->env[k], args->prom[k], &ix[k])) return sentinel_fallback;
    if (ix[k].kind == IX_TENSOR) {
      /* One tensor index, after no single position (which would drop its dimension). */
      if (at >= 0) return sentinel_fallback;
      at = k;
    }
  }
  for (int m = 0; m < at; m++)
    if (ix[m].kind == IX_INT) return sentinel_fallback;
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
  if (at >= 0 && !plain_positions(ix[at].tensor)) {
    if (py.ErrOccurred() != NULL) {
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
  /* The 0-based positions: read with index_select after the rest (R's meaning), written
   * through the key itself. */
  PyObject *positions = NULL;
  if (at >= 0 && index_tensor_to_py(ix[at].tensor, &positions) != CONV_OK) {
    store_error();
    py_decref(val);
    py.GILRelease(gil);
    return sentinel_error;
  }
  PyObject *key = py.TupleNew(n);
  int ok = key != NULL;
  for (int i = 0; ok && i < n; i++) {
    PyObject *part;
    if (set && i == at) {
      part = positions;
      py.IncRef(part);
    } else {
      part = key_part(&ix[i]);
    }
    if (part == NULL) ok = 0;
    else py.TupleSetItem(key, i, part); /* steals */
  }
  /* One index is passed as it is, not as a 1-tuple: torch reads a lone slice or int on a
   * shorter path (`perm[s:e]` in a training loop), with the same meaning. */
  PyObject *k = ok && n == 1 ? py.TupleGetItem(key, 0) : key; /* borrowed */
  SEXP out = sentinel_error;
  if (ok && set) {
    if (py.SetItem(t, k, val) == 0) out = x;
    else store_error();
  } else if (ok) {
    /* x[idx, ] (the other indices all empty) is index_select alone. */
    int only_select = at >= 0;
    for (int i = 0; i < n && only_select; i++)
      if (i != at && ix[i].kind != IX_ALL) only_select = 0;
    if (only_select) py.IncRef(t);
    PyObject *result = only_select ? t : py.GetItem(t, k);
    if (result != NULL && at >= 0) result = index_select(result, at, positions);
    if (result != NULL) out = wrap_result(result); /* steals */
    else store_error();
  } else {
    store_error();
  }
  py_decref(key);
  py_decref(val);
  py_decref(positions);
  py.GILRelease(gil);
  return out;
}

/* tb_dots_forced(rho): for the `...` of the method's frame `rho`, list(forced, values):
 * which arguments' promises have run (tb_index_dots() forces an index with effects) and
 * their values, so that R's path reads those instead of evaluating them again. */
SEXP tb_dots_forced(SEXP rho) {
  SEXP dots = TYPEOF(rho) == ENVSXP ? Rf_findVarInFrame(rho, R_DotsSymbol) : R_NilValue;
  int n = 0;
  if (TYPEOF(dots) == DOTSXP)
    for (SEXP p = dots; p != R_NilValue; p = CDR(p)) n++;
  SEXP forced = PROTECT(Rf_allocVector(LGLSXP, n));
  SEXP values = PROTECT(Rf_allocVector(VECSXP, n));
  int i = 0;
  if (TYPEOF(dots) == DOTSXP) {
    for (SEXP p = dots; p != R_NilValue; p = CDR(p), i++) {
      SEXP e = CAR(p);
      int done = TYPEOF(e) == PROMSXP && PRVALUE(e) != R_UnboundValue;
      LOGICAL(forced)[i] = done;
      if (done) SET_VECTOR_ELT(values, i, PRVALUE(e));
    }
  }
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
  SET_VECTOR_ELT(out, 0, forced);
  SET_VECTOR_ELT(out, 1, values);
  UNPROTECT(3);
  return out;
}
