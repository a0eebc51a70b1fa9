#define _GNU_SOURCE /* RTLD_DEFAULT, RTLD_NOLOAD */
/* Finding the Python C API, and the helpers all C call paths share.
 *
 * Note: why at run time. Python is already running: reticulate loaded libpython, and its C
 * API is found with dlsym() in that library (dlopen with RTLD_NOLOAD: never a second one);
 * this package neither links against Python nor starts it. When a symbol is missing
 * (another Python build, another reticulate), tb_py_init() returns FALSE and R keeps
 * calling through reticulate.
 *
 * Note: errors. A Python exception is stored where R's error handler finds it
 * (tracebridge.frontends.rbridge._last_error, as rbridge.call() does) and the C entry point
 * returns the symbol `.tb_error`; R raises the classified error from there
 * (rethrow_python()). No R error is raised while a Python reference is held.
 */
#include "pyapi.h"

#include <dlfcn.h>

void shift_cache_clear(void); /* convert.c */
#include <string.h>

PyApi py;
int py_ready = 0;
Torch torch_;

SEXP tensor_class = NULL, object_class = NULL;
SEXP sym_pyobj = NULL, sym_convert = NULL, sym_py_object = NULL, sym_dotpy = NULL;
SEXP sym_self = NULL;
SEXP r_tensor_names = NULL, r_tensor_class = NULL;
static SEXP r_false = NULL; /* FALSE, shared by every wrapper's `convert` (never changed in place) */
SEXP sentinel_fallback = NULL, sentinel_error = NULL;

static void *library = RTLD_DEFAULT;
static SEXP tb_env = NULL, sym_tracing = NULL;

/* While R traces, calls go through R, which tells the tracer the R source line of each. */
int tracing(void) {
  if (tb_env == NULL) return 1;
  SEXP v = Rf_findVarInFrame(tb_env, sym_tracing);
  return TYPEOF(v) == LGLSXP && Rf_xlength(v) == 1 && LOGICAL(v)[0] == TRUE;
}

/* The C paths apply: started, and not tracing. */
int c_path_on(void) { return py_ready && !tracing(); }

static void *find(const char *name, int *ok) {
  void *address = dlsym(library, name);
  if (address == NULL) *ok = 0;
  return address;
}

#define FIND(field, name) *(void **) (&py.field) = find(name, &ok)

static int find_api(SEXP libpython) {
  int ok = 1;
  if (TYPEOF(libpython) == STRSXP && Rf_xlength(libpython) == 1) {
    void *handle = dlopen(CHAR(STRING_ELT(libpython, 0)), RTLD_LAZY | RTLD_NOLOAD);
    if (handle != NULL) library = handle;
  }
  FIND(Call, "PyObject_Call");
  FIND(CallOneArg, "PyObject_CallOneArg");
  FIND(GILEnsure, "PyGILState_Ensure");
  FIND(GILRelease, "PyGILState_Release");
  FIND(DecRef, "Py_DecRef");
  FIND(IncRef, "Py_IncRef");
  FIND(ErrFetch, "PyErr_Fetch");
  FIND(ErrNormalize, "PyErr_NormalizeException");
  FIND(ErrOccurred, "PyErr_Occurred");
  FIND(ExcSetTraceback, "PyException_SetTraceback");
  FIND(SetAttrString, "PyObject_SetAttrString");
  FIND(GetAttr, "PyObject_GetAttr");
  FIND(GetAttrString, "PyObject_GetAttrString");
  FIND(GetItem, "PyObject_GetItem");
  FIND(SetItem, "PyObject_SetItem");
  FIND(TupleNew, "PyTuple_New");
  FIND(TupleSetItem, "PyTuple_SetItem");
  FIND(TupleSize, "PyTuple_Size");
  FIND(TupleGetItem, "PyTuple_GetItem");
  FIND(ListNew, "PyList_New");
  FIND(ListSetItem, "PyList_SetItem");
  FIND(ListSize, "PyList_Size");
  FIND(ListGetItem, "PyList_GetItem");
  FIND(DictNew, "PyDict_New");
  FIND(DictSetItem, "PyDict_SetItem");
  FIND(DictGetItemString, "PyDict_GetItemString");
  FIND(LongFromLongLong, "PyLong_FromLongLong");
  FIND(LongAsLongLongAndOverflow, "PyLong_AsLongLongAndOverflow");
  FIND(FloatFromDouble, "PyFloat_FromDouble");
  FIND(FloatAsDouble, "PyFloat_AsDouble");
  FIND(BoolFromLong, "PyBool_FromLong");
  FIND(UnicodeFromString, "PyUnicode_FromString");
  FIND(UnicodeIntern, "PyUnicode_InternFromString");
  FIND(SliceNew, "PySlice_New");
  FIND(IsTrue, "PyObject_IsTrue");
  FIND(IsSubtype, "PyType_IsSubtype");
  FIND(None, "_Py_NoneStruct");
  FIND(True, "_Py_TrueStruct");
  FIND(False, "_Py_FalseStruct");
  FIND(Ellipsis, "_Py_EllipsisObject");
  FIND(LongType, "PyLong_Type");
  FIND(FloatType, "PyFloat_Type");
  FIND(BoolType, "PyBool_Type");
  FIND(TupleType, "PyTuple_Type");
  FIND(ListType, "PyList_Type");
  FIND(Str, "PyObject_Str");
  FIND(UnicodeAsUTF8, "PyUnicode_AsUTF8");
  FIND(UnicodeAsUTF8AndSize, "PyUnicode_AsUTF8AndSize");
  FIND(ErrClear, "PyErr_Clear");
  FIND(DictNext, "PyDict_Next");
  FIND(DictType, "PyDict_Type");
  FIND(GetIter, "PyObject_GetIter");
  FIND(IterNext, "PyIter_Next");
  FIND(CFunctionNewEx, "PyCFunction_NewEx");
  FIND(CapsuleNew, "PyCapsule_New");
  FIND(CapsuleGetPointer, "PyCapsule_GetPointer");
  FIND(ErrSetString, "PyErr_SetString");
  FIND(DictSize, "PyDict_Size");
  FIND(ErrRestore, "PyErr_Restore");
  FIND(InPlaceAdd, "PyNumber_InPlaceAdd");
  FIND(TrueDivide, "PyNumber_TrueDivide");
  FIND(ExcRuntimeError, "PyExc_RuntimeError");
  FIND(ExcKeyboardInterrupt, "PyExc_KeyboardInterrupt");
  FIND(UnicodeType, "PyUnicode_Type");
  return ok;
}

/* The PyObject* inside one of reticulate's wrappers, or NULL if `x` is not one. A callable
 * comes to R as an R function whose `py_object` attribute is the wrapper. */
PyObject *object_of(SEXP x) {
  if (TYPEOF(x) == CLOSXP) x = Rf_getAttrib(x, sym_py_object);
  if (TYPEOF(x) != ENVSXP) return NULL;
  SEXP pointer = Rf_findVarInFrame(x, sym_pyobj);
  if (TYPEOF(pointer) != EXTPTRSXP) return NULL;
  return (PyObject *) R_ExternalPtrAddr(pointer);
}

/* The object behind `x`: a reticulate wrapper's, or that of `.py`, the first element of an
 * R list that holds one (a scheduler, an optimizer); NULL if neither. */
PyObject *self_of(SEXP x) {
  PyObject *self = object_of(x);
  if (self == NULL && TYPEOF(x) == VECSXP && Rf_xlength(x) >= 1) {
    SEXP names = Rf_getAttrib(x, R_NamesSymbol);
    if (TYPEOF(names) == STRSXP && strcmp(CHAR(STRING_ELT(names, 0)), ".py") == 0)
      self = object_of(VECTOR_ELT(x, 0));
  }
  return self;
}

/* The Python tensor inside an R torch_tensor (list(.py = wrapper)), or NULL. */
PyObject *tensor_of(SEXP x) {
  if (TYPEOF(x) != VECSXP || Rf_xlength(x) < 1) return NULL;
  SEXP klass = Rf_getAttrib(x, R_ClassSymbol);
  if (TYPEOF(klass) != STRSXP || Rf_xlength(klass) != 1 ||
      strcmp(CHAR(STRING_ELT(klass, 0)), "torch_tensor") != 0)
    return NULL;
  SEXP names = Rf_getAttrib(x, R_NamesSymbol);
  if (TYPEOF(names) != STRSXP || strcmp(CHAR(STRING_ELT(names, 0)), ".py") != 0) return NULL;
  return object_of(VECTOR_ELT(x, 0));
}

/* `.py` of an R object of class `cls` that is a list (torch_dtype, torch_device) or an
 * environment (torch_sym_int), or NULL. */
PyObject *py_field_of(SEXP x, const char *cls) {
  if (!Rf_inherits(x, cls)) return NULL;
  if (TYPEOF(x) == ENVSXP) return object_of(Rf_findVarInFrame(x, sym_dotpy));
  if (TYPEOF(x) != VECSXP || Rf_xlength(x) < 1) return NULL;
  SEXP names = Rf_getAttrib(x, R_NamesSymbol);
  if (TYPEOF(names) != STRSXP || strcmp(CHAR(STRING_ELT(names, 0)), ".py") != 0) return NULL;
  return object_of(VECTOR_ELT(x, 0));
}

void py_decref(PyObject *o) {
  if (o != NULL) py.DecRef(o);
}

const char *py_utf8_plain(PyObject *s) {
  ptrdiff_t size = 0;
  const char *text = py.UnicodeAsUTF8AndSize(s, &size);
  if (text == NULL) {
    py.ErrClear();
    return NULL;
  }
  return strlen(text) == (size_t) size ? text : NULL;
}

static void finalize(SEXP pointer) {
  PyObject *object = (PyObject *) R_ExternalPtrAddr(pointer);
  if (object == NULL) return;
  GILState gil = py.GILEnsure();
  py.DecRef(object);
  py.GILRelease(gil);
  R_ClearExternalPtr(pointer);
}

/* A wrapper like reticulate's for `object` (a new reference, which it takes over). */
SEXP wrap(PyObject *object, SEXP klass) {
  SEXP env = PROTECT(R_NewEnv(R_EmptyEnv, FALSE, 2));
  SEXP pointer = PROTECT(R_MakeExternalPtr(object, R_NilValue, R_NilValue));
  R_RegisterCFinalizerEx(pointer, finalize, TRUE);
  Rf_defineVar(sym_pyobj, pointer, env);
  /* One FALSE for all (R copies a value marked not mutable before changing it): one
   * allocation less a wrapper. */
  Rf_defineVar(sym_convert, r_false, env);
  Rf_setAttrib(env, R_ClassSymbol, klass);
  UNPROTECT(2);
  return env;
}

/* An R torch_tensor for a result of exactly type torch.Tensor; any other object comes back
 * as a wrapper of class "python.builtin.object", which R has reticulate wrap properly
 * (c_other()). Steals `object`. */
SEXP wrap_result(PyObject *object) {
  if (PY_TYPE(object) != torch_.tensor_type) return wrap(object, object_class);
  return wrap_tensor(object, tensor_class);
}

/* An R torch_tensor, list(.py = wrapper), whose wrapper has the class vector `klass`.
 * Steals `object`. */
SEXP wrap_tensor(PyObject *object, SEXP klass) {
  SEXP inner = PROTECT(wrap(object, klass));
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 1));
  SET_VECTOR_ELT(out, 0, inner);
  Rf_setAttrib(out, R_NamesSymbol, r_tensor_names);
  Rf_setAttrib(out, R_ClassSymbol, r_tensor_class);
  UNPROTECT(2);
  return out;
}

void store_error(void) {
  PyObject *type = NULL, *value = NULL, *traceback = NULL;
  py.ErrFetch(&type, &value, &traceback);
  py.ErrNormalize(&type, &value, &traceback);
  if (value != NULL) {
    if (traceback != NULL) py.ExcSetTraceback(value, traceback);
    if (py.SetAttrString(torch_.bridge, "_last_error", value) != 0) {
      PyObject *t2 = NULL, *v2 = NULL, *tb2 = NULL;
      py.ErrFetch(&t2, &v2, &tb2); /* nothing better to do than drop it */
      py_decref(t2);
      py_decref(v2);
      py_decref(tb2);
    }
  }
  py_decref(type);
  py_decref(value);
  py_decref(traceback);
}

PyObject *py_attr_path(PyObject *root, const char *a, const char *b, const char *c) {
  PyObject *o = py.GetAttrString(root, a), *next;
  const char *rest[2] = {b, c};
  for (int i = 0; i < 2 && o != NULL && rest[i] != NULL; i++) {
    next = py.GetAttrString(o, rest[i]);
    py.DecRef(o);
    o = next;
  }
  return o;
}

PyObject *py_tensor_method(const char *name) {
  return torch_.tensor_type == NULL ? NULL : py.GetAttrString(torch_.tensor_type, name);
}

static void clear(PyObject **slot) {
  py_decref(*slot);
  *slot = NULL;
}

static void release_all(void) {
  clear(&torch_.tensor_type);
  clear(&torch_.size_type);
  clear(&torch_.bridge);
  clear(&torch_.binary_ops);
  clear(&torch_.r_positions);
  clear(&torch_.select_positions);
  clear(&torch_.set_grad);
  clear(&torch_.is_grad);
  clear(&torch_.one);
  clear(&torch_.one_t);
  clear(&torch_.where);
  clear(&torch_.dtype_bool);
  clear(&torch_.s_add);
  clear(&torch_.s_item);
  clear(&torch_.s_ndim);
  clear(&torch_.empty);
  clear(&torch_.device);
  clear(&torch_.s_dtype);
  clear(&torch_.s_sub);
  clear(&torch_.s_is_floating_point);
  clear(&torch_.s_version);
  clear(&torch_.tensor_min);
  clear(&torch_.dtype_int64);
  clear(&torch_.dtype_int32);
  clear(&torch_.slice_all);
  clear(&torch_.optimizer_zero_grad);
  clear(&torch_.tensor_zero_);
  clear(&torch_.tensor_detach_);
  clear(&torch_.tensor_requires_grad_);
  clear(&torch_.s_zero_grad);
  clear(&torch_.s_func);
  clear(&torch_.s_grad);
  clear(&torch_.s_grad_fn);
  clear(&torch_.s_requires_grad);
  clear(&torch_.s_param_groups);
  clear(&torch_.s_is_cpu);
  clear(&torch_.s_layout);
  clear(&torch_.strided);
  clear(&torch_.tensor_is_contiguous);
  clear(&torch_.tensor_is_neg);
  clear(&torch_.tensor_numel);
  clear(&torch_.tensor_data_ptr);
}

/* The R constants of the C paths; called when the package's library loads, so that every
 * entry point can answer `.tb_fallback` before Python starts. */
void tb_init_constants(void) {
  sym_pyobj = Rf_install("pyobj");
  sym_convert = Rf_install("convert");
  sym_py_object = Rf_install("py_object");
  sym_dotpy = Rf_install(".py");
  sym_self = Rf_install("self");
  sentinel_fallback = Rf_install(".tb_fallback");
  sentinel_error = Rf_install(".tb_error");
  r_tensor_names = Rf_mkString(".py");
  R_PreserveObject(r_tensor_names);
  r_false = Rf_ScalarLogical(0);
  R_PreserveObject(r_false);
  MARK_NOT_MUTABLE(r_false);
  r_tensor_class = Rf_mkString("torch_tensor");
  R_PreserveObject(r_tensor_class);
  object_class = Rf_mkString("python.builtin.object");
  R_PreserveObject(object_class);
}

/* tb_py_init(torch, rbridge, tensor_example, libpython, tb): TRUE when the C API was found
 * and the objects the C paths use were looked up; `tb` is the package's state environment
 * (its `tracing` flag is read on every call). */
SEXP tb_py_init(SEXP torch, SEXP bridge, SEXP example, SEXP libpython, SEXP tb) {
  if (TYPEOF(tb) != ENVSXP) return Rf_ScalarLogical(0);
  if (tb_env == NULL) {
    tb_env = tb;
    R_PreserveObject(tb_env);
    sym_tracing = Rf_install("tracing");
  }
  if (!find_api(libpython)) return Rf_ScalarLogical(0);
  PyObject *t = object_of(torch), *m = object_of(bridge), *x = object_of(example);
  if (t == NULL || m == NULL || x == NULL) return Rf_ScalarLogical(0);
  GILState gil = py.GILEnsure();
  shift_cache_clear(); /* it holds tensors of the objects looked up before */
  py_ready = 0;
  release_all();
  torch_.tensor_type = py.GetAttrString(t, "Tensor");
  torch_.size_type = py.GetAttrString(t, "Size");
  torch_.set_grad = py_attr_path(t, "_C", "_set_grad_enabled", NULL);
  torch_.is_grad = py.GetAttrString(t, "is_grad_enabled");
  py.IncRef(m);
  torch_.bridge = m;
  torch_.binary_ops = py.GetAttrString(m, "BINARY_OPS");
  torch_.r_positions = py.GetAttrString(m, "r_positions");
  torch_.select_positions = py.GetAttrString(m, "select_positions");
  torch_.one = py.LongFromLongLong(1);
  PyObject *tensor_fn = py.GetAttrString(t, "tensor");
  torch_.one_t = tensor_fn == NULL ? NULL : py.CallOneArg(tensor_fn, torch_.one);
  py_decref(tensor_fn);
  torch_.where = py.GetAttrString(t, "where");
  torch_.dtype_bool = py.GetAttrString(t, "bool");
  torch_.s_add = py.UnicodeIntern("add");
  torch_.s_item = py.UnicodeIntern("item");
  torch_.s_ndim = py.UnicodeIntern("ndim");
  torch_.empty = py.GetAttrString(t, "empty");
  torch_.device = py.GetAttrString(t, "device");
  torch_.s_dtype = py.UnicodeIntern("dtype");
  torch_.s_sub = py.UnicodeIntern("sub");
  torch_.s_is_floating_point = py.UnicodeIntern("is_floating_point");
  torch_.s_version = py.UnicodeIntern("_version");
  torch_.tensor_min = py_tensor_method("min");
  torch_.dtype_int64 = py.GetAttrString(t, "int64");
  torch_.dtype_int32 = py.GetAttrString(t, "int32");
  torch_.slice_all = py.SliceNew(NULL, NULL, NULL);
  torch_.optimizer_zero_grad = py_attr_path(t, "optim", "Optimizer", NULL);
  if (torch_.optimizer_zero_grad != NULL) {
    PyObject *cls = torch_.optimizer_zero_grad;
    torch_.optimizer_zero_grad = py.GetAttrString(cls, "zero_grad");
    py.DecRef(cls);
  }
  torch_.tensor_zero_ = py_tensor_method("zero_");
  torch_.tensor_detach_ = py_tensor_method("detach_");
  torch_.tensor_requires_grad_ = py_tensor_method("requires_grad_");
  torch_.s_zero_grad = py.UnicodeIntern("zero_grad");
  torch_.s_func = py.UnicodeIntern("__func__");
  torch_.s_grad = py.UnicodeIntern("grad");
  torch_.s_grad_fn = py.UnicodeIntern("grad_fn");
  torch_.s_requires_grad = py.UnicodeIntern("requires_grad");
  torch_.s_param_groups = py.UnicodeIntern("param_groups");
  torch_.s_is_cpu = py.UnicodeIntern("is_cpu");
  torch_.s_layout = py.UnicodeIntern("layout");
  torch_.strided = py.GetAttrString(t, "strided");
  torch_.tensor_is_contiguous = py_tensor_method("is_contiguous");
  torch_.tensor_is_neg = py_tensor_method("is_neg");
  torch_.tensor_numel = py_tensor_method("numel");
  torch_.tensor_data_ptr = py_tensor_method("data_ptr");
  int ok = torch_.tensor_type && torch_.size_type && torch_.set_grad && torch_.is_grad &&
           torch_.binary_ops && torch_.r_positions && torch_.select_positions &&
           torch_.one && torch_.one_t && torch_.where && torch_.dtype_bool && torch_.s_add && torch_.s_item && torch_.s_ndim && torch_.empty && torch_.device && torch_.s_dtype &&
           torch_.s_sub && torch_.s_is_floating_point && torch_.s_version &&
           torch_.tensor_min && torch_.dtype_int64 && torch_.dtype_int32 && torch_.slice_all &&
           torch_.optimizer_zero_grad && torch_.tensor_zero_ && torch_.tensor_detach_ &&
           torch_.tensor_requires_grad_ && torch_.s_zero_grad && torch_.s_func && torch_.s_grad &&
           torch_.s_grad_fn && torch_.s_requires_grad && torch_.s_param_groups &&
           torch_.s_is_cpu && torch_.s_layout && torch_.strided && torch_.tensor_is_contiguous &&
           torch_.tensor_is_neg && torch_.tensor_numel && torch_.tensor_data_ptr &&
           PY_TYPE(x) == torch_.tensor_type;
  if (!ok) {
    if (py.ErrOccurred() != NULL) {
      PyObject *a = NULL, *b = NULL, *c = NULL;
      py.ErrFetch(&a, &b, &c);
      py_decref(a);
      py_decref(b);
      py_decref(c);
    }
    release_all();
  }
  py.GILRelease(gil);
  if (!ok) return Rf_ScalarLogical(0);
  if (tensor_class != NULL) R_ReleaseObject(tensor_class);
  tensor_class = Rf_getAttrib(example, R_ClassSymbol);
  R_PreserveObject(tensor_class);
  py_ready = 1;
  return Rf_ScalarLogical(1);
}

/* tb_py_stop(): the C paths answer "fall back" from now on, until tb_py_resume() (which
 * takes up the objects looked up before) or tb_py_init(). */
SEXP tb_py_stop(void) {
  py_ready = 0;
  return R_NilValue;
}

/* tb_py_resume(): TRUE when the C paths run again as they did before tb_py_stop(). */
SEXP tb_py_resume(void) {
  if (torch_.tensor_type != NULL && tensor_class != NULL) py_ready = 1;
  return Rf_ScalarLogical(py_ready);
}
