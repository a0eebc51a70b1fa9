/* Tensor fields (`x$shape`, `x$dtype`, `x$device`, `x$grad`, `x$requires_grad`,
 * `x$is_leaf`, `x$is_cuda`, `x$ndim`) and plain Python attributes of an R object in C.
 *
 * Note: why. Each of these was a reticulate attribute lookup and conversion: 35 us for
 * `x$requires_grad`, 140 us for `x$device`, 260 us for `x$shape` (through rbridge.sizes()),
 * against ~1 us of Python work; training loops and shape checks read them all the time.
 * The rule of convert.c holds: C answers only what R's path (tensor_field() in
 * R/tensor.R) gives exactly, and `.tb_fallback` for the rest (traced sizes while R traces,
 * a gradient of a tensor subclass, a Python error, which R's path then raises its way).
 *
 * dtype and device: R's values are lists around the Python object (dtype_from_py(),
 * device_from_py()). C keeps the ones R made, by dtype object (torch has one per dtype)
 * and by device string ("cpu", "cuda:0"), and answers with them again; a dtype or device
 * not seen yet goes through R once, which hands its value here (tb_field_remember()).
 * The kept values are marked not mutable, so an R user who changes one changes a copy.
 */
#include <stdlib.h>
#include <string.h>

#include "convert.h"

#define KEPT_MAX 32

typedef struct {
  PyObject *dtype; /* a reference, so that the address stays this dtype's */
  char *device;    /* str(torch.device) */
  SEXP value;      /* preserved */
} Kept;

static Kept kept[KEPT_MAX];
static int n_kept = 0;

static void clear_error(void) {
  PyObject *type = NULL, *value = NULL, *traceback = NULL;
  py.ErrFetch(&type, &value, &traceback);
  py_decref(type);
  py_decref(value);
  py_decref(traceback);
}

/* str(device), copied; NULL (no Python error left) where it has none. */
static char *device_key(PyObject *device) {
  PyObject *s = py.Str(device);
  const char *text = s == NULL ? NULL : py.UnicodeAsUTF8(s);
  char *out = text == NULL ? NULL : strdup(text);
  py_decref(s);
  if (out == NULL) clear_error();
  return out;
}

/* The kept R value for a dtype object or a device key; NULL if none. */
static SEXP kept_value(PyObject *dtype, const char *device) {
  for (int i = 0; i < n_kept; i++) {
    if (dtype != NULL && kept[i].dtype == dtype) return kept[i].value;
    if (device != NULL && kept[i].device != NULL && strcmp(kept[i].device, device) == 0)
      return kept[i].value;
  }
  return NULL;
}

static int is_name(SEXP name, const char *what) {
  return strcmp(CHAR(STRING_ELT(name, 0)), what) == 0;
}

/* The attribute `attr` of `t` as R's path converts it (kind: a result kind of convert.h);
 * `.tb_fallback` where C does not convert it the same way. */
static SEXP attribute(PyObject *t, const char *attr, int kind) {
  PyObject *v = py.GetAttrString(t, attr);
  if (v == NULL) {
    clear_error();
    return sentinel_fallback;
  }
  SEXP out = R_NilValue;
  int status = result_to_r(v, kind, &out);
  py.DecRef(v);
  if (status == CONV_PYERR) clear_error();
  return status == CONV_OK ? out : sentinel_fallback;
}

/* x.grad: NULL for None, an R tensor for a plain tensor (from_py() would wrap a subclass
 * with its own class vector: R does that one). */
static SEXP grad_of(PyObject *t) {
  PyObject *g = py.GetAttrString(t, "grad");
  if (g == NULL) {
    clear_error();
    return sentinel_fallback;
  }
  if (g == py.None) {
    py.DecRef(g);
    return R_NilValue;
  }
  if (PY_TYPE(g) != torch_.tensor_type) {
    py.DecRef(g);
    return sentinel_fallback;
  }
  return wrap_result(g); /* steals */
}

static SEXP dtype_of(PyObject *t) {
  PyObject *d = py.GetAttr(t, torch_.s_dtype);
  if (d == NULL) {
    clear_error();
    return sentinel_fallback;
  }
  SEXP out = kept_value(d, NULL);
  py.DecRef(d);
  return out == NULL ? sentinel_fallback : out;
}

static SEXP device_of(PyObject *t) {
  PyObject *d = py.GetAttrString(t, "device");
  if (d == NULL) {
    clear_error();
    return sentinel_fallback;
  }
  char *key = device_key(d);
  py.DecRef(d);
  SEXP out = key == NULL ? NULL : kept_value(NULL, key);
  free(key);
  return out == NULL ? sentinel_fallback : out;
}

/* tb_tensor_field(x, name): the field `name` of R tensor `x`, or `.tb_fallback`. */
SEXP tb_tensor_field(SEXP x, SEXP name) {
  if (!c_path_on() || TYPEOF(name) != STRSXP || Rf_xlength(name) != 1) return sentinel_fallback;
  PyObject *t = tensor_of(x);
  if (t == NULL) return sentinel_fallback;
  GILState gil = py.GILEnsure();
  SEXP out = sentinel_fallback;
  if (is_name(name, "shape")) out = attribute(t, "shape", R_SIZES);
  else if (is_name(name, "requires_grad")) out = attribute(t, "requires_grad", R_R);
  else if (is_name(name, "is_leaf")) out = attribute(t, "is_leaf", R_R);
  else if (is_name(name, "is_cuda")) out = attribute(t, "is_cuda", R_R);
  else if (is_name(name, "ndim")) out = attribute(t, "ndim", R_R);
  else if (is_name(name, "grad")) out = grad_of(t);
  else if (is_name(name, "dtype")) out = dtype_of(t);
  else if (is_name(name, "device")) out = device_of(t);
  py.GILRelease(gil);
  return out;
}

/* tb_field_remember(x, name, value): keep `value`, the torch_dtype or torch_device R made
 * for `x$dtype` or `x$device`, for the next tensors with that dtype or device. */
SEXP tb_field_remember(SEXP x, SEXP name, SEXP value) {
  PyObject *t = tensor_of(x);
  if (!py_ready || t == NULL || TYPEOF(name) != STRSXP || Rf_xlength(name) != 1 ||
      n_kept >= KEPT_MAX)
    return R_NilValue;
  int dtype = is_name(name, "dtype") && Rf_inherits(value, "torch_dtype");
  int device = is_name(name, "device") && Rf_inherits(value, "torch_device");
  if (!dtype && !device) return R_NilValue;
  GILState gil = py.GILEnsure();
  PyObject *d = dtype ? py.GetAttr(t, torch_.s_dtype) : py.GetAttrString(t, "device");
  char *key = NULL;
  if (d == NULL) clear_error();
  else if (device) key = device_key(d);
  if (d != NULL && (dtype || key != NULL) && kept_value(dtype ? d : NULL, key) == NULL) {
    MARK_NOT_MUTABLE(value);
    R_PreserveObject(value);
    kept[n_kept].dtype = dtype ? d : NULL; /* keeps the reference */
    kept[n_kept].device = key;
    kept[n_kept].value = value;
    n_kept++;
    d = NULL;
    key = NULL;
  }
  py_decref(d);
  free(key);
  py.GILRelease(gil);
  return R_NilValue;
}

/* tb_attr_r(x, name): the attribute `name` of the Python object of `x` (a reticulate
 * wrapper or an R object with `.py`: a scheduler) as R values (from_py(): plain scalars,
 * tensors, tuples and lists of them), or `.tb_fallback`. */
SEXP tb_attr_r(SEXP x, SEXP name) {
  if (!c_path_on() || TYPEOF(name) != STRSXP || Rf_xlength(name) != 1) return sentinel_fallback;
  PyObject *self = object_of(x);
  if (self == NULL && TYPEOF(x) == VECSXP && Rf_xlength(x) >= 1) {
    SEXP names = Rf_getAttrib(x, R_NamesSymbol);
    if (TYPEOF(names) == STRSXP && strcmp(CHAR(STRING_ELT(names, 0)), ".py") == 0)
      self = object_of(VECTOR_ELT(x, 0));
  }
  if (self == NULL) return sentinel_fallback;
  GILState gil = py.GILEnsure();
  SEXP out = attribute(self, CHAR(STRING_ELT(name, 0)), R_TENSOR);
  py.GILRelease(gil);
  return out;
}
