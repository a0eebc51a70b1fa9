/* R values to Python arguments by the kinds of inst/surface.tsv, and Python results back
 * to R, in C.
 *
 * Note: the rule is "the same as R, or not at all". Each kind below converts exactly the
 * values whose R conversion (R/surface.R, convert_arg(); R/tensor.R, scalar_py()) is
 * plain: a tensor, one whole number, a dimension other than 0, ... Anything else (an R
 * vector to make into a tensor, a 0 dimension that R refuses with its own message, NA, a
 * value with a class or dim attribute) answers CONV_FALLBACK, and R converts the whole
 * call as it always did: the C path never gives a different result or error, only a
 * faster one.
 */
#include "convert.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* A plain R vector: no class, no dim (reticulate would make an array of it). */
static int plain(SEXP v) {
  return !OBJECT(v) && Rf_getAttrib(v, R_DimSymbol) == R_NilValue;
}

int whole_int(SEXP v, long long *out) {
  if (!plain(v) || Rf_xlength(v) != 1) return 0;
  if (TYPEOF(v) == INTSXP) {
    if (INTEGER(v)[0] == NA_INTEGER) return 0;
    *out = INTEGER(v)[0];
    return 1;
  }
  if (TYPEOF(v) == REALSXP) {
    double d = REAL(v)[0];
    /* as.integer() gives NA (and a warning) past int range: R's path decides those. */
    if (!R_FINITE(d) || d != floor(d) || fabs(d) > 2147483647.0) return 0;
    *out = (long long) d;
    return 1;
  }
  return 0;
}

/* `.py` of a tensor or a traced integer: what most kinds pass as it is. */
static PyObject *passthrough(SEXP v) {
  PyObject *o = tensor_of(v);
  if (o == NULL) o = py_field_of(v, "torch_sym_int");
  return o;
}

static int give(PyObject *o, PyObject **out) {
  if (o == NULL) return CONV_PYERR;
  *out = o;
  return CONV_OK;
}

static int borrowed(PyObject *o, PyObject **out) {
  py.IncRef(o);
  *out = o;
  return CONV_OK;
}

/* scalar_py(): a tensor or traced integer as it is; one integer, double or logical as
 * reticulate converts it (int, float, bool). */
int scalar_to_py(SEXP v, PyObject **out) {
  PyObject *o = passthrough(v);
  if (o != NULL) return borrowed(o, out);
  if (!plain(v) || Rf_xlength(v) != 1) return CONV_FALLBACK;
  switch (TYPEOF(v)) {
  case INTSXP:
    if (INTEGER(v)[0] == NA_INTEGER) return CONV_FALLBACK;
    return give(py.LongFromLongLong(INTEGER(v)[0]), out);
  case REALSXP:
    if (ISNAN(REAL(v)[0])) return CONV_FALLBACK;
    return give(py.FloatFromDouble(REAL(v)[0]), out);
  case LGLSXP:
    if (LOGICAL(v)[0] == NA_LOGICAL) return CONV_FALLBACK;
    return borrowed(LOGICAL(v)[0] ? py.True : py.False, out);
  default:
    return CONV_FALLBACK;
  }
}

/* One 1-based R position (dim_one(), index1_arg()) as Python's 0-based one; 0 is left to
 * R, which says that positions are 1-based. */
static int position(SEXP v, PyObject **out) {
  PyObject *o = py_field_of(v, "torch_sym_int");
  if (o != NULL) return borrowed(o, out);
  long long d;
  if (!whole_int(v, &d) || d == 0) return CONV_FALLBACK;
  return give(py.LongFromLongLong(d > 0 ? d - 1 : d), out);
}

static int tuple_of(SEXP v, int (*one)(SEXP, PyObject **), PyObject **out) {
  if (!plain(v) || (TYPEOF(v) != INTSXP && TYPEOF(v) != REALSXP && TYPEOF(v) != VECSXP))
    return CONV_FALLBACK;
  R_xlen_t n = Rf_xlength(v);
  PyObject *t = py.TupleNew(n);
  if (t == NULL) return CONV_PYERR;
  for (R_xlen_t i = 0; i < n; i++) {
    SEXP item;
    if (TYPEOF(v) == VECSXP) item = VECTOR_ELT(v, i);
    else if (TYPEOF(v) == INTSXP) item = Rf_ScalarInteger(INTEGER(v)[i]);
    else item = Rf_ScalarReal(REAL(v)[i]);
    PROTECT(item);
    PyObject *o = NULL;
    int status = one(item, &o);
    UNPROTECT(1);
    if (status != CONV_OK) {
      py.DecRef(t);
      return status;
    }
    py.TupleSetItem(t, i, o); /* steals o */
  }
  *out = t;
  return CONV_OK;
}

/* int_arg(): a traced integer or tensor as it is, else one whole number. */
static int int_one(SEXP v, PyObject **out) {
  PyObject *o = passthrough(v);
  if (o != NULL) return borrowed(o, out);
  long long n;
  if (!whole_int(v, &n)) return CONV_FALLBACK;
  return give(py.LongFromLongLong(n), out);
}

static int double_one(SEXP v, PyObject **out) {
  PyObject *o = passthrough(v);
  if (o != NULL) return borrowed(o, out);
  if (!plain(v) || Rf_xlength(v) != 1) return CONV_FALLBACK;
  double d;
  switch (TYPEOF(v)) {
  case REALSXP: d = REAL(v)[0]; break;
  case INTSXP:
    if (INTEGER(v)[0] == NA_INTEGER) return CONV_FALLBACK;
    d = INTEGER(v)[0];
    break;
  case LGLSXP:
    if (LOGICAL(v)[0] == NA_LOGICAL) return CONV_FALLBACK;
    d = LOGICAL(v)[0];
    break;
  default: return CONV_FALLBACK;
  }
  if (ISNAN(d)) return CONV_FALLBACK;
  return give(py.FloatFromDouble(d), out);
}

static int tensor_only(SEXP v, PyObject **out) {
  PyObject *o = tensor_of(v);
  if (o == NULL) return CONV_FALLBACK;
  return borrowed(o, out);
}

/* size_arg(): the sizes of a factory or of view()/reshape(), as a tuple of ints. */
static int size_kind(SEXP v, int dots, PyObject **out) {
  if (dots && TYPEOF(v) == VECSXP && Rf_xlength(v) == 1) {
    SEXP first = VECTOR_ELT(v, 0);
    if (TYPEOF(first) == VECSXP || Rf_xlength(first) != 1) v = first;
  }
  if (TYPEOF(v) == VECSXP && OBJECT(v)) return CONV_FALLBACK;
  return tuple_of(v, int_one, out);
}

/* The Python list of tensors of `tensors:tensors` (torch_cat(list(a, b))). */
static int tensor_list(SEXP v, PyObject **out) {
  if (TYPEOF(v) != VECSXP || OBJECT(v)) return CONV_FALLBACK;
  R_xlen_t n = Rf_xlength(v);
  for (R_xlen_t i = 0; i < n; i++)
    if (tensor_of(VECTOR_ELT(v, i)) == NULL) return CONV_FALLBACK;
  PyObject *list = py.ListNew(n);
  if (list == NULL) return CONV_PYERR;
  for (R_xlen_t i = 0; i < n; i++) {
    PyObject *t = tensor_of(VECTOR_ELT(v, i));
    py.IncRef(t);
    py.ListSetItem(list, i, t); /* steals */
  }
  *out = list;
  return CONV_OK;
}

/* arg_py(): whole doubles become ints; a Python object (a reticulate wrapper) is passed as
 * it is. */
static int any_kind(SEXP v, PyObject **out) {
  PyObject *o = passthrough(v);
  if (o == NULL) o = py_field_of(v, "torch_dtype");
  if (o == NULL && TYPEOF(v) == ENVSXP) o = object_of(v);
  if (o != NULL) return borrowed(o, out);
  if (v == R_NilValue) return borrowed(py.None, out);
  /* I(x): a number kept a Python float even when whole (a plateau scheduler's metric). */
  if (TYPEOF(v) == REALSXP && Rf_xlength(v) == 1 && Rf_inherits(v, "AsIs")) {
    if (ISNAN(REAL(v)[0])) return CONV_FALLBACK;
    return give(py.FloatFromDouble(REAL(v)[0]), out);
  }
  long long n;
  if (TYPEOF(v) == REALSXP && whole_int(v, &n)) return give(py.LongFromLongLong(n), out);
  if (TYPEOF(v) == REALSXP && !R_FINITE(REAL(v)[0])) return CONV_FALLBACK;
  return scalar_to_py(v, out);
}

/* The kinds of the dtypes seen so far. torch has one object per dtype, alive as long as
 * torch is, so a pointer (kept with a reference) answers for it: the two attribute
 * lookups it replaces were ~5,000 instructions, twice in `x[idx, ]`. */
static PyObject *known_dtypes[32];
static int known_kinds[32];
static int known_count = 0;

int tensor_dtype_kind(PyObject *t) {
  PyObject *dtype = py.GetAttr(t, torch_.s_dtype);
  if (dtype == NULL) return -1;
  for (int i = 0; i < known_count; i++) {
    if (known_dtypes[i] == dtype) {
      py.DecRef(dtype);
      return known_kinds[i];
    }
  }
  int kind = dtype == torch_.dtype_bool ? 2 : 0;
  if (kind == 0) {
    PyObject *fp = py.GetAttr(dtype, torch_.s_is_floating_point);
    if (fp == NULL) kind = -1;
    else kind = fp == py.True ? 1 : 0;
    py_decref(fp);
  }
  if (kind >= 0 && known_count < 32) {
    known_dtypes[known_count] = dtype; /* keeps the reference */
    known_kinds[known_count++] = kind;
  } else {
    py.DecRef(dtype);
  }
  return kind;
}

/* t - 1 (Tensor.sub: recorded as a torch op). The 1 is a 0-d int64 tensor: it takes
 * sub's first overload (Tensor other) at once, with no tensor made from a Python number
 * on each call, and promotes as the number would (a 0-d tensor never changes the dtype of
 * a tensor of the same kind: int32 stays int32). */
static PyObject *minus_one(PyObject *t) {
  PyObject *sub = py.GetAttr(t, torch_.s_sub);
  if (sub == NULL) return NULL;
  PyObject *r = py.CallOneArg(sub, torch_.one_t);
  py.DecRef(sub);
  return r;
}

/* Note: the shift cache. A training loop indexes with one tensor of positions twice a
 * step (`xb <- X[idx, ]`, `yb <- Y[idx]`), and evaluation loops pass the same targets to a
 * loss again and again; each shift is a torch op (~9,000 instructions). So the last few
 * shifts are kept, each keyed on the tensor itself (held, so that its address can not be
 * taken by another object) and on its version counter, which every in-place write bumps
 * (through the tensor, its views, `$detach()`, `[<-`, `$copy_()`, ...). The shifted tensor
 * is checked the same way, in case an op handed it on as a view that was then written.
 * Writes that torch does not count are those through an alias that R hands out with
 * `$data` (its own counter) or `$py` (Python's `.data`, `.numpy()`, ...), and `$data <-`:
 * once R has done one of these for an integer tensor, the cache is emptied and stays off
 * for the session (tb_shift_untracked()). A tensor without a version counter (an
 * inference tensor) is never cached. Positions and class targets are shifted apart
 * (rbridge.r_positions() keeps negative positions, which count from the end; a negative
 * class target names no class and is shifted as `ignore_index` is), so a slot says which. */
#define SHIFT_SLOTS 4

typedef struct {
  PyObject *source, *shifted; /* NULL: an empty slot */
  long long source_version, shifted_version;
  int positions; /* 1: shifted by rbridge.r_positions(), 0: minus one (classes) */
} ShiftSlot;

static ShiftSlot shift_slots[SHIFT_SLOTS];
static int shift_next = 0, shift_off = 0;
static double shift_hits = 0, shift_misses = 0, memory_reads = 0;

static void clear_python_error(void) {
  PyObject *type = NULL, *value = NULL, *traceback = NULL;
  py.ErrFetch(&type, &value, &traceback);
  py_decref(type);
  py_decref(value);
  py_decref(traceback);
}

/* The version counter of tensor `t`; 0 (no Python error left) where it has none. */
static int version_of(PyObject *t, long long *out) {
  PyObject *v = py.GetAttr(t, torch_.s_version);
  if (v == NULL) {
    clear_python_error();
    return 0;
  }
  int overflow = 0;
  *out = PY_TYPE(v) == py.LongType ? py.LongAsLongLongAndOverflow(v, &overflow) : -1;
  py.DecRef(v);
  if (py.ErrOccurred() != NULL) clear_python_error();
  return !overflow && *out >= 0;
}

static void slot_release(ShiftSlot *slot) {
  py_decref(slot->source);
  py_decref(slot->shifted);
  slot->source = slot->shifted = NULL;
}

void shift_cache_clear(void) {
  if (!py_ready) return;
  GILState gil = py.GILEnsure();
  for (int i = 0; i < SHIFT_SLOTS; i++) slot_release(&shift_slots[i]);
  py.GILRelease(gil);
}

/* tb_shift_cache(reset): the cache's hits, misses, whether it is off, and how many
 * positions were read from memory (positive_in_memory()); reset = TRUE
 * empties it and turns it on again (for tests, which run in one session). */
SEXP tb_shift_cache(SEXP reset) {
  if (LOGICAL(reset)[0] == TRUE) {
    shift_cache_clear();
    shift_off = 0;
  }
  SEXP out = PROTECT(Rf_allocVector(REALSXP, 4));
  REAL(out)[0] = shift_hits;
  REAL(out)[1] = shift_misses;
  REAL(out)[2] = shift_off;
  REAL(out)[3] = memory_reads;
  UNPROTECT(1);
  return out;
}

/* tb_shift_untracked(x): R is handing out an alias of tensor `x` whose writes torch may
 * not count (see the note above); an integer tensor turns the cache off. */
SEXP tb_shift_untracked(SEXP x) {
  PyObject *t = tensor_of(x);
  if (!py_ready || shift_off) return R_NilValue;
  GILState gil = py.GILEnsure();
  int kind = t == NULL ? 0 : tensor_dtype_kind(t);
  if (kind < 0) clear_python_error();
  py.GILRelease(gil);
  if (kind == 0 || kind < 0) {
    shift_off = 1;
    shift_cache_clear();
  }
  return R_NilValue;
}

/* One of `t`'s attributes (or methods called with no argument) is `want`; 0 otherwise,
 * no Python error left. */
static int attr_is(PyObject *t, PyObject *name, PyObject *method, PyObject *want) {
  PyObject *v = name != NULL ? py.GetAttr(t, name) : py.CallOneArg(method, t);
  int is = v != NULL && v == want;
  if (v == NULL) clear_python_error();
  py_decref(v);
  return is;
}

/* A method of `t` called with no argument, as a C integer; -1 (no Python error left) where
 * it fails or is no int. */
static long long int_method(PyObject *t, PyObject *method) {
  PyObject *v = py.CallOneArg(method, t);
  int overflow = 0;
  long long out = v != NULL && PY_TYPE(v) == py.LongType ? py.LongAsLongLongAndOverflow(v, &overflow) : -1;
  if (v == NULL || py.ErrOccurred() != NULL) clear_python_error();
  py_decref(v);
  return overflow ? -1 : out;
}

/* Note: positions read from memory. A training loop's `idx` (a slice of a permutation) is
 * an int64 CPU tensor of ~32 elements: asking torch for its min() and .item() made two
 * ops (~14,000 instructions, two tensors a step); reading its elements is ~100. Only an
 * exact torch.Tensor (no subclass code to run) that is int64 or int32, on the CPU,
 * strided, contiguous, without a negative bit (a private `_neg_view`), and not empty is
 * read; its data_ptr() accounts for the storage offset. Any other goes to min(). */

/* Whether every element of `t` is above 0, read from its memory: 1 or 0; -1 where it can
 * not be read here (no Python error left). */
static int positive_in_memory(PyObject *t) {
  if (PY_TYPE(t) != torch_.tensor_type) return -1;
  PyObject *dtype = py.GetAttr(t, torch_.s_dtype);
  if (dtype == NULL) {
    clear_python_error();
    return -1;
  }
  int wide = dtype == torch_.dtype_int64, narrow = dtype == torch_.dtype_int32;
  py.DecRef(dtype);
  if (!(wide || narrow) || !attr_is(t, torch_.s_is_cpu, NULL, py.True) ||
      !attr_is(t, torch_.s_layout, NULL, torch_.strided) ||
      !attr_is(t, NULL, torch_.tensor_is_contiguous, py.True) ||
      !attr_is(t, NULL, torch_.tensor_is_neg, py.False))
    return -1;
  long long n = int_method(t, torch_.tensor_numel);
  long long at = n > 0 ? int_method(t, torch_.tensor_data_ptr) : -1;
  if (n <= 0 || at <= 0) return -1;
  memory_reads++;
  if (wide) {
    const int64_t *v = (const int64_t *) (uintptr_t) at;
    for (long long i = 0; i < n; i++)
      if (v[i] <= 0) return 0;
  } else {
    const int32_t *v = (const int32_t *) (uintptr_t) at;
    for (long long i = 0; i < n; i++)
      if (v[i] <= 0) return 0;
  }
  return 1;
}

/* Whether every element of integer tensor `t` is above 0 (no Python error left). */
static int all_above_zero(PyObject *t) {
  int in_memory = positive_in_memory(t);
  if (in_memory >= 0) return in_memory;
  PyObject *least = py.CallOneArg(torch_.tensor_min, t), *item = NULL, *value = NULL;
  if (least != NULL) item = py.GetAttr(least, torch_.s_item);
  PyObject *none = item == NULL ? NULL : py.TupleNew(0);
  if (none != NULL) value = py.Call(item, none, NULL);
  int overflow = 0;
  long long v = value != NULL && PY_TYPE(value) == py.LongType
                    ? py.LongAsLongLongAndOverflow(value, &overflow)
                    : 0;
  py_decref(least);
  py_decref(item);
  py_decref(none);
  py_decref(value);
  if (py.ErrOccurred() != NULL) clear_python_error(); /* an empty tensor has no min */
  return overflow > 0 || (overflow == 0 && v > 0);
}

/* Note: positions that are all above 0 (a loop's `idx <- perm[s:e]`) are shifted with
 * one op, t - 1: that is what rbridge.r_positions() gives for them (its `>`, where(), `==`
 * and masked_fill() change nothing there), and that Python function cost ~21 us a call,
 * ~18 us more than t - 1, a twentieth of a training step (benchmarks/bench_r.R). Telling
 * costs one reduction and .item() (~2 us); an empty tensor, a negative position or a 0
 * goes through r_positions(). Not while tracing (the C paths are off): a trace records
 * r_positions() from R, which holds for any position. */
static PyObject *r_positions(PyObject *t) {
  if (all_above_zero(t)) return minus_one(t);
  return py.CallOneArg(torch_.r_positions, t);
}

/* Positions (`positions` = 1): rbridge.r_positions(t), which keeps negative positions
 * (counted from the end) and makes 0 fail in the op; classes: minus_one(t). From the cache
 * where `t` and the shifted tensor are as they were. */
static PyObject *shifted_positions(PyObject *t, int positions) {
  long long version, shifted_version;
  int versioned = !shift_off && version_of(t, &version);
  if (versioned) {
    for (int i = 0; i < SHIFT_SLOTS; i++) {
      ShiftSlot *slot = &shift_slots[i];
      if (slot->source != t || slot->positions != positions) continue;
      if (slot->source_version == version && version_of(slot->shifted, &shifted_version) &&
          shifted_version == slot->shifted_version) {
        shift_hits++;
        py.IncRef(slot->shifted);
        return slot->shifted;
      }
      slot_release(slot); /* written since: shift again */
    }
  }
  shift_misses++;
  PyObject *r = positions ? r_positions(t) : minus_one(t);
  if (r == NULL || !versioned || !version_of(r, &shifted_version)) return r;
  ShiftSlot *slot = &shift_slots[shift_next];
  shift_next = (shift_next + 1) % SHIFT_SLOTS;
  slot_release(slot);
  py.IncRef(t);
  py.IncRef(r);
  slot->source = t;
  slot->shifted = r;
  slot->source_version = version;
  slot->shifted_version = shifted_version;
  slot->positions = positions;
  return r;
}

int index_tensor_to_py(PyObject *t, PyObject **out) {
  int kind = tensor_dtype_kind(t);
  if (kind < 0) return CONV_PYERR;
  if (kind == 1) return CONV_FALLBACK; /* R says that indices must be integers */
  if (kind == 2) return borrowed(t, out);
  return give(shifted_positions(t, 1), out);
}

int class_index_to_py(SEXP v, SEXP ignore_index, int shift_ignore, PyObject **out) {
  PyObject *t = tensor_of(v);
  if (t == NULL) return CONV_FALLBACK;
  long long ign = 1;
  if (ignore_index != R_NilValue && !whole_int(ignore_index, &ign)) return CONV_FALLBACK;
  int kind = tensor_dtype_kind(t);
  if (kind < 0) return CONV_PYERR;
  if (kind == 1) return borrowed(t, out); /* class probabilities */
  PyObject *shifted = shifted_positions(t, 0);
  if (shifted == NULL) return CONV_PYERR;
  /* A negative ignore_index (no class) is shifted by the caller as the targets are
   * (ignore_index_arg() in R/surface.R). */
  if (ign >= 1 || shift_ignore) return give(shifted, out);
  /* A negative ignore_index names no class: targets equal to it stay as they are. */
  PyObject *eq = py.GetAttrString(t, "eq"), *value = py.LongFromLongLong(ign), *mask = NULL;
  if (eq != NULL && value != NULL) mask = py.CallOneArg(eq, value);
  py_decref(eq);
  py_decref(value);
  PyObject *args = mask == NULL ? NULL : py.TupleNew(3), *r = NULL;
  if (args != NULL) {
    py.IncRef(t);
    py.TupleSetItem(args, 0, mask);
    py.TupleSetItem(args, 1, t);
    py.TupleSetItem(args, 2, shifted);
    r = py.Call(torch_.where, args, NULL);
    py.DecRef(args);
  } else {
    py_decref(mask);
    py.DecRef(shifted);
  }
  return give(r, out);
}

int to_py_kind(SEXP v, int kind, int dots, PyObject **out) {
  long long n;
  switch (kind) {
  case K_TENSOR: return tensor_only(v, out);
  case K_SCALAR: return scalar_to_py(v, out);
  case K_DIM:
    if (tensor_of(v) != NULL) return CONV_FALLBACK; /* torch_max(x, y): R decides */
    if (TYPEOF(v) == VECSXP || Rf_xlength(v) > 1) return tuple_of(v, position, out);
    return position(v, out);
  case K_DIMS: return tuple_of(v, position, out);
  case K_INDEX1: return position(v, out);
  case K_INT: return int_one(v, out);
  case K_INTS: {
    PyObject *o = py_field_of(v, "torch_sym_int");
    if (o != NULL) return borrowed(o, out);
    if (TYPEOF(v) == STRSXP && plain(v) && Rf_xlength(v) == 1 && STRING_ELT(v, 0) != NA_STRING)
      return give(py.UnicodeFromString(Rf_translateCharUTF8(STRING_ELT(v, 0))), out);
    if (TYPEOF(v) == VECSXP || Rf_xlength(v) == 0) return CONV_FALLBACK;
    if (Rf_xlength(v) == 1) {
      if (!whole_int(v, &n)) return CONV_FALLBACK;
      return give(py.LongFromLongLong(n), out);
    }
    return tuple_of(v, int_one, out);
  }
  case K_DOUBLE: return double_one(v, out);
  case K_DOUBLES:
    if (Rf_xlength(v) == 1 || tensor_of(v) != NULL) return double_one(v, out);
    if (TYPEOF(v) == VECSXP || Rf_xlength(v) == 0) return CONV_FALLBACK;
    return tuple_of(v, double_one, out);
  case K_BOOL:
    /* isTRUE(as.logical(v)) */
    if (!plain(v) || Rf_xlength(v) != 1) return CONV_FALLBACK;
    if (TYPEOF(v) == LGLSXP) return borrowed(LOGICAL(v)[0] == TRUE ? py.True : py.False, out);
    return CONV_FALLBACK;
  case K_STRING:
    if (TYPEOF(v) != STRSXP || !plain(v) || Rf_xlength(v) != 1 || STRING_ELT(v, 0) == NA_STRING)
      return CONV_FALLBACK;
    return give(py.UnicodeFromString(Rf_translateCharUTF8(STRING_ELT(v, 0))), out);
  case K_DTYPE: {
    PyObject *o = py_field_of(v, "torch_dtype");
    if (o == NULL) return CONV_FALLBACK;
    return borrowed(o, out);
  }
  case K_DEVICE: {
    PyObject *o = py_field_of(v, "torch_device");
    if (o != NULL) return borrowed(o, out);
    /* device_py(): a string such as "cpu" is torch.device("cpu") (its error is Python's). */
    if (TYPEOF(v) != STRSXP || !plain(v) || Rf_xlength(v) != 1 || STRING_ELT(v, 0) == NA_STRING)
      return CONV_FALLBACK;
    PyObject *s = py.UnicodeFromString(Rf_translateCharUTF8(STRING_ELT(v, 0)));
    if (s == NULL) return CONV_PYERR;
    PyObject *d = py.CallOneArg(torch_.device, s);
    py.DecRef(s);
    return give(d, out);
  }
  case K_SIZE: return size_kind(v, dots, out);
  case K_TENSORS: return tensor_list(v, out);
  case K_ANY: return any_kind(v, out);
  case K_INDEX: {
    PyObject *t = tensor_of(v);
    if (t == NULL) return CONV_FALLBACK;
    return index_tensor_to_py(t, out);
  }
  case K_LONG: {
    /* long_arg(): an integer tensor as it is (a float one: R says it must hold whole
     * numbers), R whole numbers as an int64 tensor, not shifted. */
    PyObject *t = tensor_of(v);
    if (t == NULL) return long_tensor_to_py(v, out);
    int kind = tensor_dtype_kind(t);
    if (kind < 0) return CONV_PYERR;
    if (kind == 1) return CONV_FALLBACK;
    return borrowed(t, out);
  }
  case K_PARAMS: {
    /* params_arg(): a tensor, or a list of tensors (`model$parameters`), as a Python list;
     * parameter groups and the rest R converts (and refuses with its own message). */
    PyObject *t = tensor_of(v);
    if (t == NULL) return tensor_list(v, out);
    PyObject *list = py.ListNew(1);
    if (list == NULL) return CONV_PYERR;
    py.IncRef(t);
    py.ListSetItem(list, 0, t); /* steals */
    *out = list;
    return CONV_OK;
  }
  case K_OPTIMIZER: {
    /* optimizer_py(): the torch.optim object of an optim_*() optimizer. */
    PyObject *o = py_field_of(v, "torch_optimizer");
    if (o == NULL) return CONV_FALLBACK;
    return borrowed(o, out);
  }
  default: return CONV_FALLBACK;
  }
}

/* ---- results ------------------------------------------------------------------------ */

static int is_type(PyObject *o, PyObject *type) { return PY_TYPE(o) == type; }

/* reticulate's py_to_r() for a plain Python scalar; FALLBACK for anything else (and for an
 * int past R's integer range, which reticulate converts its own way). */
static int scalar_to_r(PyObject *o, SEXP *out) {
  if (o == py.None) {
    *out = R_NilValue;
    return CONV_OK;
  }
  if (is_type(o, py.BoolType)) {
    *out = Rf_ScalarLogical(o == py.True);
    return CONV_OK;
  }
  if (is_type(o, py.FloatType)) {
    *out = Rf_ScalarReal(py.FloatAsDouble(o));
    return CONV_OK;
  }
  if (is_type(o, py.UnicodeType)) { /* as reticulate: one UTF-8 string */
    const char *s = py_utf8_plain(o);
    if (s == NULL) return CONV_FALLBACK; /* not UTF-8, or a NUL inside: R's conversion decides */
    *out = Rf_ScalarString(Rf_mkCharCE(s, CE_UTF8));
    return CONV_OK;
  }
  if (is_type(o, py.LongType)) {
    int overflow = 0;
    long long n = py.LongAsLongLongAndOverflow(o, &overflow);
    if (overflow || n > 2147483647LL || n <= -2147483648LL) return CONV_FALLBACK;
    *out = Rf_ScalarInteger((int) n);
    return CONV_OK;
  }
  return CONV_FALLBACK;
}

static int is_sequence(PyObject *o) {
  return is_type(o, py.TupleType) || is_type(o, py.ListType);
}

static ptrdiff_t seq_size(PyObject *o) {
  return is_type(o, py.ListType) ? py.ListSize(o) : py.TupleSize(o);
}

/* borrowed */
static PyObject *seq_item(PyObject *o, ptrdiff_t i) {
  return is_type(o, py.ListType) ? py.ListGetItem(o, i) : py.TupleGetItem(o, i);
}

static SEXP tensor_to_r(PyObject *t) {
  py.IncRef(t);
  return wrap_result(t);
}

/* from_py(): a tensor wrapped, a plain scalar converted, a tuple or list walked. */
static int from_py_c(PyObject *o, SEXP *out) {
  if (is_type(o, torch_.tensor_type)) {
    *out = tensor_to_r(o);
    return CONV_OK;
  }
  if (is_sequence(o)) {
    ptrdiff_t n = seq_size(o);
    SEXP list = PROTECT(Rf_allocVector(VECSXP, n));
    for (ptrdiff_t i = 0; i < n; i++) {
      SEXP item;
      if (from_py_c(seq_item(o, i), &item) != CONV_OK) {
        UNPROTECT(1);
        return CONV_FALLBACK;
      }
      SET_VECTOR_ELT(list, i, item);
    }
    UNPROTECT(1);
    *out = list;
    return CONV_OK;
  }
  return scalar_to_r(o, out);
}

/* A 1-based index tensor from a 0-based one (plus_one()); NULL on a Python error. */
static PyObject *plus_one(PyObject *t) {
  PyObject *add = py.GetAttr(t, torch_.s_add);
  if (add == NULL) return NULL;
  PyObject *r = py.CallOneArg(add, torch_.one);
  py.DecRef(add);
  return r;
}

/* The pair of values and 1-based indices (torch.return_types.max and kin are tuples). */
static int values_indices(PyObject *o, SEXP *out) {
  if (!py.IsSubtype(PY_TYPE(o), py.TupleType) || py.TupleSize(o) != 2) return CONV_FALLBACK;
  PyObject *values = py.TupleGetItem(o, 0), *indices = py.TupleGetItem(o, 1);
  if (!is_type(values, torch_.tensor_type) || !is_type(indices, torch_.tensor_type))
    return CONV_FALLBACK;
  PyObject *shifted = plus_one(indices);
  if (shifted == NULL) return CONV_PYERR;
  if (!is_type(shifted, torch_.tensor_type)) {
    py.DecRef(shifted);
    return CONV_FALLBACK;
  }
  SEXP list = PROTECT(Rf_allocVector(VECSXP, 2));
  SET_VECTOR_ELT(list, 1, wrap_result(shifted));
  SET_VECTOR_ELT(list, 0, tensor_to_r(values));
  UNPROTECT(1);
  *out = list;
  return CONV_OK;
}

/* simplify_sizes(from_py()): torch.Size (or a tuple of ints) as an R integer vector. */
static int sizes_to_r(PyObject *o, SEXP *out) {
  if (!(is_type(o, torch_.size_type) || is_sequence(o))) return scalar_to_r(o, out);
  ptrdiff_t n = seq_size(o);
  SEXP v = PROTECT(Rf_allocVector(INTSXP, n));
  for (ptrdiff_t i = 0; i < n; i++) {
    PyObject *item = seq_item(o, i);
    SEXP r;
    if (!is_type(item, py.LongType) || scalar_to_r(item, &r) != CONV_OK) {
      UNPROTECT(1);
      return CONV_FALLBACK;
    }
    INTEGER(v)[i] = INTEGER(r)[0];
  }
  UNPROTECT(1);
  *out = v;
  return CONV_OK;
}

int result_to_r(PyObject *result, int kind, SEXP *out) {
  switch (kind) {
  case R_TENSOR:
    if (is_type(result, torch_.tensor_type)) {
      *out = tensor_to_r(result);
      return CONV_OK;
    }
    return from_py_c(result, out);
  case R_INDEX: {
    if (!is_type(result, torch_.tensor_type)) return CONV_FALLBACK;
    PyObject *shifted = plus_one(result);
    if (shifted == NULL) return CONV_PYERR;
    *out = wrap_result(shifted);
    return CONV_OK;
  }
  case R_MAYBE_VALUES_INDICES:
    if (is_type(result, torch_.tensor_type)) {
      *out = tensor_to_r(result);
      return CONV_OK;
    }
    return values_indices(result, out);
  case R_VALUES_INDICES: return values_indices(result, out);
  case R_TENSORS:
    if (!is_sequence(result)) return CONV_FALLBACK;
    return from_py_c(result, out);
  case R_R: return scalar_to_r(result, out);
  case R_SIZES: return sizes_to_r(result, out);
  case R_NONE:
    *out = R_NilValue;
    return CONV_OK;
  default: return CONV_FALLBACK;
  }
}
