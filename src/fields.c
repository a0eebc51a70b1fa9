/* Tensor fields (`x$shape`, `x$dtype`, `x$device`, `x$grad`, `x$requires_grad`,
 * `x$is_leaf`, `x$is_cuda`, `x$ndim`), plain Python attributes of an R object (a
 * scheduler's `$last_epoch`) and an optimizer's `$param_groups` in C.
 *
 * Note: why. Each of these was a reticulate attribute lookup and conversion: 35 us for
 * `x$requires_grad`, 140 us for `x$device`, 260 us for `x$shape` (through rbridge.sizes()),
 * against ~1 us of Python work; training loops and shape checks read them all the time
 * (and `opt$param_groups[[1]]$lr`, 960 us through reticulate, logs many of them).
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

SEXP tb_shift_untracked(SEXP x); /* convert.c */

/* x.data, a plain tensor, as an R tensor (R wraps another type). Its writes are not
 * counted by torch: the shift cache is told first (see convert.c). */
static SEXP data_of(SEXP x, PyObject *t) {
  tb_shift_untracked(x);
  PyObject *d = py.GetAttrString(t, "data");
  if (d == NULL) {
    clear_error();
    return sentinel_fallback;
  }
  if (PY_TYPE(d) != torch_.tensor_type) {
    py.DecRef(d);
    return sentinel_fallback;
  }
  return wrap_result(d);
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
  else if (is_name(name, "data")) out = data_of(x, t);
  py.GILRelease(gil);
  return out;
}

/* tb_field_remember(x, name, value): keep `value`, the torch_dtype or torch_device R made
 * for `x$dtype` or `x$device`, for the next tensors with that dtype or device. */
SEXP tb_field_remember(SEXP x, SEXP name, SEXP value) {
  PyObject *t = tensor_of(x);
  /* Not while R traces: the tracer would see the attribute reads. */
  if (!c_path_on() || t == NULL || TYPEOF(name) != STRSXP || Rf_xlength(name) != 1 ||
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
  PyObject *self = self_of(x);
  if (self == NULL) return sentinel_fallback;
  GILState gil = py.GILEnsure();
  SEXP out = attribute(self, CHAR(STRING_ELT(name, 0)), R_TENSOR);
  py.GILRelease(gil);
  return out;
}

/* ---- an optimizer's param_groups ------------------------------------------------------ */

/* Class vectors reticulate gave tensors of other types than torch.Tensor (an optimizer's
 * parameters are torch.nn.Parameter), by type: R's path hands them here
 * (tb_remember_class()), and C then wraps such tensors as R's path does. */
#define CLASSES_MAX 8
static PyObject *class_types[CLASSES_MAX]; /* references */
static SEXP class_vectors[CLASSES_MAX];    /* preserved */
static int n_classes = 0;

/* tb_remember_class(wrapper): keep the class vector of reticulate's wrapper of a tensor. */
SEXP tb_remember_class(SEXP wrapper) {
  PyObject *o = object_of(wrapper);
  SEXP klass = Rf_getAttrib(wrapper, R_ClassSymbol);
  if (!py_ready || o == NULL || TYPEOF(klass) != STRSXP || n_classes >= CLASSES_MAX)
    return R_NilValue;
  PyObject *type = PY_TYPE(o);
  if (type == torch_.tensor_type) return R_NilValue;
  for (int i = 0; i < n_classes; i++)
    if (class_types[i] == type) return R_NilValue;
  GILState gil = py.GILEnsure();
  py.IncRef(type);
  py.GILRelease(gil);
  R_PreserveObject(klass);
  class_types[n_classes] = type;
  class_vectors[n_classes++] = klass;
  return R_NilValue;
}

/* wrap_tensor() of tensor `o` (borrowed) with reticulate's class vector; NULL where its
 * type's vector is not known. */
static SEXP tensor_like(PyObject *o) {
  if (PY_TYPE(o) == torch_.tensor_type) {
    py.IncRef(o);
    return wrap_result(o);
  }
  for (int i = 0; i < n_classes; i++) {
    if (class_types[i] != PY_TYPE(o)) continue;
    py.IncRef(o);
    return wrap_tensor(o, class_vectors[i]);
  }
  return NULL;
}

/* py_to_r() of a setting of a group: None, a bool, an int, a float, or a tuple or list of
 * those (betas); NULL where reticulate's conversion is not that plain. */
static SEXP setting(PyObject *v) {
  SEXP out = R_NilValue;
  if (PY_TYPE(v) != py.TupleType && PY_TYPE(v) != py.ListType)
    return result_to_r(v, R_R, &out) == CONV_OK ? out : NULL;
  int tuple = PY_TYPE(v) == py.TupleType;
  ptrdiff_t n = tuple ? py.TupleSize(v) : py.ListSize(v);
  SEXP list = PROTECT(Rf_allocVector(VECSXP, n));
  for (ptrdiff_t i = 0; i < n; i++) {
    PyObject *item = tuple ? py.TupleGetItem(v, i) : py.ListGetItem(v, i);
    if (result_to_r(item, R_R, &out) != CONV_OK) {
      UNPROTECT(1);
      return NULL;
    }
    SET_VECTOR_ELT(list, i, out);
  }
  UNPROTECT(1);
  return list;
}

/* One group (a dict) as param_group_r() makes it; NULL where C does not convert it. */
static SEXP group(PyObject *g) {
  if (PY_TYPE(g) != py.DictType) return NULL;
  ptrdiff_t pos = 0, n = 0;
  PyObject *key, *value;
  while (py.DictNext(g, &pos, &key, &value)) n++;
  SEXP out = PROTECT(Rf_allocVector(VECSXP, n));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, n));
  pos = 0;
  for (ptrdiff_t i = 0; py.DictNext(g, &pos, &key, &value); i++) {
    const char *name = py.UnicodeAsUTF8(key); /* borrowed: valid while the key lives */
    if (name == NULL) {
      clear_error();
      UNPROTECT(2);
      return NULL;
    }
    SET_STRING_ELT(names, i, Rf_mkCharCE(name, CE_UTF8));
    SEXP v = NULL;
    if (strcmp(name, "params") == 0 && PY_TYPE(value) == py.ListType) {
      ptrdiff_t np = py.ListSize(value);
      v = PROTECT(Rf_allocVector(VECSXP, np));
      for (ptrdiff_t k = 0; k < np; k++) {
        SEXP t = tensor_like(py.ListGetItem(value, k));
        if (t == NULL) {
          UNPROTECT(3);
          return NULL;
        }
        SET_VECTOR_ELT(v, k, t);
      }
      UNPROTECT(1);
    } else if (strcmp(name, "params") != 0) {
      v = setting(value);
    }
    if (v == NULL) {
      UNPROTECT(2);
      return NULL;
    }
    SET_VECTOR_ELT(out, i, v);
  }
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(2);
  return out;
}

/* tb_param_groups(x): `opt$param_groups` of an optimizer (an R list with `.py`) as
 * param_group_r() gives each group, or `.tb_fallback`. */
SEXP tb_param_groups(SEXP x) {
  if (!c_path_on() || TYPEOF(x) != VECSXP || Rf_xlength(x) < 1) return sentinel_fallback;
  SEXP names = Rf_getAttrib(x, R_NamesSymbol);
  if (TYPEOF(names) != STRSXP || strcmp(CHAR(STRING_ELT(names, 0)), ".py") != 0)
    return sentinel_fallback;
  PyObject *opt = object_of(VECTOR_ELT(x, 0));
  if (opt == NULL) return sentinel_fallback;
  GILState gil = py.GILEnsure();
  SEXP out = sentinel_fallback;
  PyObject *groups = py.GetAttrString(opt, "param_groups");
  if (groups == NULL) {
    clear_error();
  } else if (PY_TYPE(groups) == py.ListType) {
    ptrdiff_t n = py.ListSize(groups);
    SEXP list = PROTECT(Rf_allocVector(VECSXP, n));
    int ok = 1;
    for (ptrdiff_t i = 0; i < n && ok; i++) {
      SEXP g = group(py.ListGetItem(groups, i));
      if (g == NULL) ok = 0;
      else SET_VECTOR_ELT(list, i, g);
    }
    if (ok) out = list;
    UNPROTECT(1);
  }
  py_decref(groups);
  py.GILRelease(gil);
  return out;
}

/* tb_set_attr(x, name, value): setattr() of the tensor inside R tensor `x` to `value`
 * (NULL: None; TRUE or FALSE; an R tensor), as `x$grad <- value` does through reticulate;
 * NULL when done, `.tb_fallback` where C does not apply or Python refused (R's path then
 * does it its own way: `x$requires_grad <- TRUE` of a non-leaf, which the setter refuses
 * and requires_grad_() accepts, or raises its error). */
SEXP tb_set_attr(SEXP x, SEXP name, SEXP value) {
  if (!c_path_on() || TYPEOF(name) != STRSXP || Rf_xlength(name) != 1) return sentinel_fallback;
  PyObject *t = tensor_of(x), *v = NULL;
  if (value == R_NilValue) v = py.None;
  else if (TYPEOF(value) == LGLSXP && Rf_xlength(value) == 1 && LOGICAL(value)[0] != NA_LOGICAL)
    v = LOGICAL(value)[0] ? py.True : py.False;
  else v = tensor_of(value);
  if (t == NULL || v == NULL) return sentinel_fallback;
  GILState gil = py.GILEnsure();
  int status = py.SetAttrString(t, CHAR(STRING_ELT(name, 0)), v);
  if (status != 0) clear_error();
  py.GILRelease(gil);
  return status == 0 ? R_NilValue : sentinel_fallback;
}

/* ---- a module's parameters and buffers --------------------------------------------------- */

/* The (name, tensor) pairs of iterator `it` as a named R list; NULL where C does not convert
 * them (a tensor type whose class vector R has not handed over, a Python error). */
static SEXP named_pairs(PyObject *it) {
  /* The pairs first (new references), then the R list of their exact length. */
  PyObject **items = NULL, *item;
  ptrdiff_t n = 0, size = 0;
  int ok = 1;
  while (ok && (item = py.IterNext(it)) != NULL) {
    if (n == size) {
      size = size == 0 ? 16 : 2 * size;
      PyObject **grown = realloc(items, size * sizeof(PyObject *));
      if (grown == NULL) {
        py.DecRef(item);
        ok = 0;
        break;
      }
      items = grown;
    }
    items[n++] = item;
    ok = PY_TYPE(item) == py.TupleType && py.TupleSize(item) == 2;
  }
  if (py.ErrOccurred() != NULL) {
    clear_error();
    ok = 0;
  }
  SEXP out = NULL;
  if (ok) {
    SEXP values = PROTECT(Rf_allocVector(VECSXP, n));
    SEXP names = PROTECT(Rf_allocVector(STRSXP, n));
    for (ptrdiff_t k = 0; k < n && ok; k++) {
      const char *name = py.UnicodeAsUTF8(py.TupleGetItem(items[k], 0));
      SEXP t = name == NULL ? NULL : tensor_like(py.TupleGetItem(items[k], 1));
      if (t == NULL) {
        ok = 0;
        break;
      }
      SET_VECTOR_ELT(values, k, t);
      SET_STRING_ELT(names, k, Rf_mkCharCE(name, CE_UTF8));
    }
    if (ok && n > 0) Rf_setAttrib(values, R_NamesSymbol, names);
    if (ok) out = values;
    UNPROTECT(2);
    if (py.ErrOccurred() != NULL) clear_error();
  }
  for (ptrdiff_t k = 0; k < n; k++) py.DecRef(items[k]);
  free(items);
  return out;
}

/* tb_named_tensors(module, method): `module.method()` (named_parameters, named_buffers,
 * state_dict: its items) of
 * the Python module in reticulate wrapper `module`, as named_tensors() makes it in R, or
 * `.tb_fallback`. */
SEXP tb_named_tensors(SEXP module, SEXP method) {
  if (!c_path_on() || TYPEOF(method) != STRSXP || Rf_xlength(method) != 1)
    return sentinel_fallback;
  PyObject *self = object_of(module);
  if (self == NULL) return sentinel_fallback;
  GILState gil = py.GILEnsure();
  PyObject *fn = py.GetAttrString(self, CHAR(STRING_ELT(method, 0)));
  PyObject *args = fn == NULL ? NULL : py.TupleNew(0);
  PyObject *pairs = args == NULL ? NULL : py.Call(fn, args, NULL);
  if (pairs != NULL && py.IsSubtype(PY_TYPE(pairs), py.DictType)) { /* state_dict() */
    PyObject *items = py.GetAttrString(pairs, "items");
    PyObject *view = items == NULL ? NULL : py.Call(items, args, NULL);
    py_decref(items);
    py.DecRef(pairs);
    pairs = view;
  }
  PyObject *it = pairs == NULL ? NULL : py.GetIter(pairs);
  SEXP out = it == NULL ? NULL : named_pairs(it);
  if (out != NULL) PROTECT(out);
  if (py.ErrOccurred() != NULL) clear_error();
  py_decref(it);
  py_decref(pairs);
  py_decref(args);
  py_decref(fn);
  py.GILRelease(gil);
  if (out == NULL) return sentinel_fallback;
  UNPROTECT(1);
  return out;
}
