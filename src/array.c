/* as_array() in C: the values of a CPU tensor read from its memory into an R vector or
 * array, without NumPy.
 *
 * Note: layout. A contiguous tensor is row-major (the last index varies fastest), an R
 * array column-major (the first does): element (i0, ..., ik) moves from row-major offset
 * to column-major offset, so `as_array(x)[i, j]` is `x[i, j]`. Types follow
 * rbridge.tensor_to_r() and reticulate's conversion of its NumPy array: floats become
 * doubles; int64 becomes integer when every value fits (R has no 64-bit integers, as in
 * mlverse), else double; smaller integers integer; bool logical. Others (float16, complex,
 * sparse, other devices) and tensors read while tracing go through R.
 */
#include <stdint.h>
#include <string.h>

#include "convert.h"

#define MAX_DIMS 32

enum { D_F32, D_F64, D_I64, D_I32, D_I16, D_I8, D_U8, D_BOOL, D_COUNT };
static PyObject *dtypes[D_COUNT];
static PyObject *strided = NULL;
static PyObject *torch_seen = NULL; /* the torch.Tensor these were read for */

/* tb_as_array_init(dtypes, strided): torch.float32, float64, int64, int32, int16, int8,
 * uint8, bool (this order) and torch.strided, from R once the C path starts. */
SEXP tb_as_array_init(SEXP examples, SEXP layout) {
  if (!py_ready || TYPEOF(examples) != VECSXP || Rf_xlength(examples) != D_COUNT)
    return Rf_ScalarLogical(0);
  GILState gil = py.GILEnsure();
  for (int i = 0; i < D_COUNT; i++) {
    py_decref(dtypes[i]);
    dtypes[i] = object_of(VECTOR_ELT(examples, i));
    if (dtypes[i] != NULL) py.IncRef(dtypes[i]);
  }
  py_decref(strided);
  strided = object_of(layout);
  if (strided != NULL) py.IncRef(strided);
  torch_seen = torch_.tensor_type;
  py.GILRelease(gil);
  return Rf_ScalarLogical(strided != NULL);
}

static PyObject *call_method(PyObject *o, const char *name) {
  PyObject *m = py.GetAttrString(o, name);
  if (m == NULL) return NULL;
  PyObject *empty = py.TupleNew(0);
  PyObject *r = empty == NULL ? NULL : py.Call(m, empty, NULL);
  py_decref(empty);
  py.DecRef(m);
  return r;
}

/* Row-major `src` of `n` elements with sizes `dims` into column-major `dst`. */
#define TRANSPOSE(SRC_T, dst, CONV)                                                           \
  do {                                                                                       \
    const SRC_T *src = (const SRC_T *) data;                                                 \
    if (nd <= 1) {                                                                           \
      for (R_xlen_t s = 0; s < n; s++) dst[s] = CONV(src[s]);                                \
    } else if (nd == 2) {                                                                    \
      R_xlen_t rows = dims[0], cols = dims[1];                                               \
      for (R_xlen_t i = 0; i < rows; i++)                                                    \
        for (R_xlen_t j = 0; j < cols; j++) dst[i + j * rows] = CONV(src[i * cols + j]);     \
    } else {                                                                                 \
      R_xlen_t idx[MAX_DIMS] = {0}, stride[MAX_DIMS], off = 0;                               \
      stride[0] = 1;                                                                         \
      for (int m = 1; m < nd; m++) stride[m] = stride[m - 1] * dims[m - 1];                  \
      for (R_xlen_t s = 0; s < n; s++) {                                                     \
        dst[off] = CONV(src[s]);                                                             \
        int m = nd - 1;                                                                      \
        idx[m]++;                                                                            \
        off += stride[m];                                                                    \
        while (m > 0 && idx[m] == dims[m]) {                                                 \
          off -= stride[m] * dims[m];                                                        \
          idx[m] = 0;                                                                        \
          m--;                                                                               \
          idx[m]++;                                                                          \
          off += stride[m];                                                                  \
        }                                                                                    \
      }                                                                                      \
    }                                                                                        \
  } while (0)

#define AS_IS(v) (v)
#define AS_DOUBLE(v) ((double) (v))
#define AS_INT(v) ((int) (v))
#define AS_LGL(v) ((v) ? TRUE : FALSE)

/* Reads sizes and dtype; 0 where R must convert. */
static int describe(PyObject *t, int *code, int *nd, R_xlen_t *dims, R_xlen_t *n) {
  PyObject *dtype = py.GetAttrString(t, "dtype");
  if (dtype == NULL) return -1;
  *code = -1;
  for (int i = 0; i < D_COUNT; i++)
    if (dtype == dtypes[i]) *code = i;
  py.DecRef(dtype);
  if (*code < 0) return 0;
  PyObject *cpu = py.GetAttrString(t, "is_cpu");
  if (cpu == NULL) return -1;
  int on_cpu = cpu == py.True;
  py.DecRef(cpu);
  PyObject *layout = py.GetAttrString(t, "layout");
  if (layout == NULL) return -1;
  int is_strided = layout == strided;
  py.DecRef(layout);
  if (!on_cpu || !is_strided) return 0;
  PyObject *shape = py.GetAttrString(t, "shape");
  if (shape == NULL) return -1;
  if (!py.IsSubtype(PY_TYPE(shape), py.TupleType)) {
    py.DecRef(shape);
    return 0;
  }
  ptrdiff_t k = py.TupleSize(shape);
  if (k > MAX_DIMS) {
    py.DecRef(shape);
    return 0;
  }
  *nd = (int) k;
  *n = 1;
  for (ptrdiff_t i = 0; i < k; i++) {
    PyObject *s = py.TupleGetItem(shape, i);
    int overflow = 0;
    long long v = PY_TYPE(s) == py.LongType ? py.LongAsLongLongAndOverflow(s, &overflow) : -1;
    if (v < 0 || overflow) {
      py.DecRef(shape);
      return 0;
    }
    dims[i] = (R_xlen_t) v;
    *n *= dims[i];
  }
  py.DecRef(shape);
  return 1;
}

/* tb_as_array(x): the R vector (0 or 1 dimension) or array of a tensor's values. */
SEXP tb_as_array(SEXP x) {
  PyObject *t = tensor_of(x);
  if (!c_path_on() || t == NULL || strided == NULL || torch_seen != torch_.tensor_type)
    return sentinel_fallback;
  int code = -1, nd = 0;
  R_xlen_t dims[MAX_DIMS], n = 0;
  GILState gil = py.GILEnsure();
  int ok = describe(t, &code, &nd, dims, &n);
  py.GILRelease(gil);
  if (ok < 0) {
    store_error();
    return sentinel_error;
  }
  if (ok == 0) return sentinel_fallback;
  /* Allocate before holding a Python reference: an R error here leaks nothing. */
  SEXPTYPE type = (code == D_F32 || code == D_F64) ? REALSXP : code == D_BOOL ? LGLSXP : INTSXP;
  SEXP out = PROTECT(Rf_allocVector(type, n));
  SEXP wide = PROTECT(code == D_I64 ? Rf_allocVector(REALSXP, n) : R_NilValue);
  SEXP dim = PROTECT(nd >= 2 ? Rf_allocVector(INTSXP, nd) : R_NilValue);
  for (int i = 0; i < nd && nd >= 2; i++) INTEGER(dim)[i] = (int) dims[i];
  gil = py.GILEnsure();
  PyObject *c = call_method(t, "contiguous");
  PyObject *address = c == NULL ? NULL : call_method(c, "data_ptr");
  if (address == NULL) {
    store_error();
    py_decref(c);
    py.GILRelease(gil);
    UNPROTECT(3);
    return sentinel_error;
  }
  int overflow = 0;
  long long at = py.LongAsLongLongAndOverflow(address, &overflow);
  py.DecRef(address);
  const void *data = (const void *) (uintptr_t) at;
  if (n > 0 && (data == NULL || overflow)) {
    py.DecRef(c);
    py.GILRelease(gil);
    UNPROTECT(3);
    return sentinel_fallback;
  }
  int fits = 1;
  switch (code) {
  case D_F32: TRANSPOSE(float, REAL(out), AS_DOUBLE); break;
  case D_F64: TRANSPOSE(double, REAL(out), AS_IS); break;
  case D_I32: TRANSPOSE(int32_t, INTEGER(out), AS_INT); break;
  case D_I16: TRANSPOSE(int16_t, INTEGER(out), AS_INT); break;
  case D_I8: TRANSPOSE(int8_t, INTEGER(out), AS_INT); break;
  case D_U8: TRANSPOSE(uint8_t, INTEGER(out), AS_INT); break;
  case D_BOOL: TRANSPOSE(uint8_t, LOGICAL(out), AS_LGL); break;
  case D_I64: {
    const int64_t *src = (const int64_t *) data;
    for (R_xlen_t s = 0; s < n && fits; s++)
      fits = src[s] > -2147483648LL && src[s] < 2147483648LL;
    if (fits) TRANSPOSE(int64_t, INTEGER(out), AS_INT);
    else TRANSPOSE(int64_t, REAL(wide), AS_DOUBLE);
    break;
  }
  }
  py.DecRef(c);
  py.GILRelease(gil);
  if (!fits) out = wide;
  if (nd >= 2) Rf_setAttrib(out, R_DimSymbol, dim);
  UNPROTECT(3);
  return out;
}

/* ---- torch_tensor() from R data ------------------------------------------------------ */

/* o.name(*args) for a tuple `args` (stolen); NULL on a Python error. */
static PyObject *call_method_args(PyObject *o, const char *name, PyObject *args) {
  if (args == NULL) return NULL;
  PyObject *m = py.GetAttrString(o, name);
  PyObject *r = m == NULL ? NULL : py.Call(m, args, NULL);
  py_decref(m);
  py.DecRef(args);
  return r;
}

/* The tensor of R's values, before the dtype asked for: R's memory is column-major, so it
 * is a row-major tensor of the reversed sizes, copied in; its dimensions are then put back
 * in R's order and made contiguous (what rbridge.tensor_from_r() gives). */
static PyObject *tensor_of_r_values(SEXP data, int nd, const int *sizes) {
  int type = TYPEOF(data);
  R_xlen_t n = Rf_xlength(data);
  PyObject *size = py.TupleNew(nd), *kwargs = py.DictNew(), *args = py.TupleNew(1);
  PyObject *source = type == REALSXP ? dtypes[D_F64] : type == INTSXP ? dtypes[D_I32] : dtypes[D_BOOL];
  PyObject *t = NULL;
  int ok = size != NULL && kwargs != NULL && args != NULL;
  for (int k = 0; ok && k < nd; k++) {
    PyObject *s = py.LongFromLongLong(sizes[nd - 1 - k]);
    if (s == NULL) ok = 0;
    else py.TupleSetItem(size, k, s);
  }
  if (ok && py.DictSetItem(kwargs, torch_.s_dtype, source) == 0) {
    py.TupleSetItem(args, 0, size); /* steals */
    size = NULL;
    t = py.Call(torch_.empty, args, kwargs);
  }
  py_decref(size);
  py_decref(kwargs);
  py_decref(args);
  if (t == NULL) return NULL;
  PyObject *address = call_method(t, "data_ptr");
  int overflow = 0;
  long long at = address == NULL ? 0 : py.LongAsLongLongAndOverflow(address, &overflow);
  py_decref(address);
  if (address == NULL || overflow || (at == 0 && n > 0)) {
    py.DecRef(t);
    return NULL;
  }
  if (type == REALSXP) {
    memcpy((void *) (intptr_t) at, REAL(data), n * sizeof(double));
  } else if (type == INTSXP) {
    memcpy((void *) (intptr_t) at, INTEGER(data), n * sizeof(int));
  } else {
    uint8_t *dst = (uint8_t *) (intptr_t) at;
    const int *src = LOGICAL(data);
    for (R_xlen_t i = 0; i < n; i++) dst[i] = src[i] != 0;
  }
  if (nd == 1) return t;
  PyObject *order = py.TupleNew(nd);
  for (int k = 0; order != NULL && k < nd; k++) {
    PyObject *d = py.LongFromLongLong(nd - 1 - k);
    if (d == NULL) {
      py.DecRef(order);
      order = NULL;
    } else {
      py.TupleSetItem(order, k, d);
    }
  }
  PyObject *permuted = call_method_args(t, "permute", order == NULL ? NULL : order);
  py.DecRef(t);
  if (permuted == NULL) return NULL;
  PyObject *out = call_method(permuted, "contiguous");
  py.DecRef(permuted);
  return out;
}

/* long_arg() of R/surface.R (whole numbers that are not positions: lengths, offsets,
 * labels) for a plain integer or double vector, matrix or array of whole numbers in R's
 * integer range: an int64 tensor of its values, shaped as torch_tensor() shapes it.
 * CONV_FALLBACK for anything else (NA, fractions, a class, no elements: R checks them and
 * says why), before any Python object is made. */
int long_tensor_to_py(SEXP v, PyObject **out) {
  int type = TYPEOF(v);
  if (torch_seen != torch_.tensor_type || torch_.empty == NULL || dtypes[D_I64] == NULL ||
      (type != REALSXP && type != INTSXP) || OBJECT(v))
    return CONV_FALLBACK;
  R_xlen_t n = Rf_xlength(v);
  if (n == 0 || n > 2147483647) return CONV_FALLBACK;
  SEXP dim = Rf_getAttrib(v, R_DimSymbol);
  int nd = dim == R_NilValue ? 1 : LENGTH(dim);
  int sizes[MAX_DIMS];
  if (nd < 1 || nd > MAX_DIMS) return CONV_FALLBACK;
  if (dim == R_NilValue) sizes[0] = (int) n;
  else for (int k = 0; k < nd; k++) sizes[k] = INTEGER(dim)[k];
  SEXP ints = v;
  if (type == REALSXP) {
    const double *d = REAL(v);
    for (R_xlen_t i = 0; i < n; i++)
      if (!R_FINITE(d[i]) || d[i] != (double) (long long) d[i] || d[i] > 2147483647.0 ||
          d[i] < -2147483647.0)
        return CONV_FALLBACK;
    ints = Rf_allocVector(INTSXP, n);
    for (R_xlen_t i = 0; i < n; i++) INTEGER(ints)[i] = (int) d[i];
  } else {
    for (R_xlen_t i = 0; i < n; i++)
      if (INTEGER(v)[i] == NA_INTEGER) return CONV_FALLBACK;
  }
  PROTECT(ints);
  PyObject *t = tensor_of_r_values(ints, nd, sizes);
  UNPROTECT(1);
  if (t == NULL) return py.ErrOccurred() != NULL ? CONV_PYERR : CONV_FALLBACK;
  PyObject *to = py.GetAttrString(t, "to");
  PyObject *converted = to == NULL ? NULL : py.CallOneArg(to, dtypes[D_I64]);
  py_decref(to);
  py.DecRef(t);
  if (converted == NULL) return CONV_PYERR;
  *out = converted;
  return CONV_OK;
}

/* tb_tensor_from_r(data, dtype): torch_tensor(data, dtype) for a plain double, integer or
 * logical vector, matrix or array (no class; no NA among integers and logicals, which R's
 * path converts its own way) and a torch_dtype; an R torch_tensor, `.tb_error`, or
 * `.tb_fallback` (R makes it, through NumPy). */
SEXP tb_tensor_from_r(SEXP data, SEXP dtype) {
  int type = TYPEOF(data);
  if (!c_path_on() || torch_seen != torch_.tensor_type || torch_.empty == NULL ||
      (type != REALSXP && type != INTSXP && type != LGLSXP) || OBJECT(data))
    return sentinel_fallback;
  PyObject *target = py_field_of(dtype, "torch_dtype");
  R_xlen_t n = Rf_xlength(data);
  if (target == NULL || n == 0 || n > 2147483647) return sentinel_fallback;
  SEXP dim = Rf_getAttrib(data, R_DimSymbol);
  int nd = dim == R_NilValue ? 1 : LENGTH(dim);
  int sizes[MAX_DIMS];
  if (nd < 1 || nd > MAX_DIMS) return sentinel_fallback;
  if (dim == R_NilValue) sizes[0] = (int) n;
  else for (int k = 0; k < nd; k++) sizes[k] = INTEGER(dim)[k];
  if (type != REALSXP) {
    const int *v = INTEGER(data);
    for (R_xlen_t i = 0; i < n; i++)
      if (v[i] == NA_INTEGER) return sentinel_fallback;
  }
  GILState gil = py.GILEnsure();
  PyObject *t = tensor_of_r_values(data, nd, sizes);
  if (t != NULL && PY_TYPE(t) == torch_.tensor_type) {
    PyObject *current = py.GetAttr(t, torch_.s_dtype);
    if (current == NULL) {
      py.DecRef(t);
      t = NULL;
    } else {
      if (current != target) {
        PyObject *to = py.GetAttrString(t, "to");
        PyObject *converted = to == NULL ? NULL : py.CallOneArg(to, target);
        py_decref(to);
        py.DecRef(t);
        t = converted;
      }
      py.DecRef(current);
    }
  }
  SEXP out;
  if (t == NULL && py.ErrOccurred() == NULL) {
    out = sentinel_fallback; /* no memory address to copy to: R's path decides */
  } else if (t == NULL) {
    store_error();
    out = sentinel_error;
  } else {
    out = wrap_result(t); /* steals */
  }
  py.GILRelease(gil);
  return out;
}
