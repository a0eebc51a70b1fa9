#define _GNU_SOURCE /* RTLD_DEFAULT, RTLD_NOLOAD */
/* The one-tensor call of a traced module, from R to Python without reticulate's per-call
 * machinery.
 *
 * Note: why this file exists.
 *   reticulate::py_call() converts each argument through R's S3 generic r_to_py() and
 *   computes the class vector of the result from its type's MRO, on every call: about
 *   70-120 us on this project's machine, against ~12 us for the traced call itself
 *   (benchmarks/bench_r.R). A traced model is called in loops, so its commonest call (one
 *   tensor in, one tensor out) comes here instead: the Python objects inside reticulate's
 *   wrappers are passed straight to PyObject_CallOneArg, and a tensor result is wrapped the
 *   way reticulate wraps it (an environment holding the object in `pyobj`, `convert`, and
 *   the class vector reticulate gave the first tensor), so every reticulate function takes
 *   it. Anything else (another argument, a result of another type) is left to reticulate by
 *   the R caller.
 *
 *   Python is already running: reticulate loaded libpython, and its C API is found with
 *   dlsym() in that library (dlopen with RTLD_NOLOAD); this package neither links against
 *   Python nor starts it. When a symbol is missing (another Python build, another
 *   reticulate), tb_call_init() says so and R keeps calling through reticulate.
 *
 *   A Python exception is stored where R's error handler finds it
 *   (tracebridge.frontends.rbridge._last_error, as rbridge.call() does) and the call
 *   returns FALSE; R raises the classified error from there (c_result()).
 */

#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

typedef struct _object PyObject;
typedef int GILState; /* PyGILState_STATE is an enum */

/* Only the header every Python object starts with (stable across CPython 3.x builds). */
typedef struct {
  ptrdiff_t refcnt;
  PyObject *type;
} ObjectHead;

static PyObject *(*CallOneArg)(PyObject *, PyObject *);
static GILState (*GILEnsure)(void);
static void (*GILRelease)(GILState);
static void (*DecRef)(PyObject *);
static void (*IncRef)(PyObject *);
static void (*ErrFetch)(PyObject **, PyObject **, PyObject **);
static void (*ErrNormalize)(PyObject **, PyObject **, PyObject **);
static int (*ExcSetTraceback)(PyObject *, PyObject *);
static int (*SetAttrString)(PyObject *, const char *, PyObject *);

static PyObject *tensor_type = NULL; /* torch.Tensor: results of exactly this type are wrapped */
static PyObject *bridge_module = NULL; /* tracebridge.frontends.rbridge */
static SEXP tensor_class = NULL;       /* reticulate's class vector for a torch.Tensor */
static SEXP sym_pyobj = NULL, sym_convert = NULL, sym_py_object = NULL;
static SEXP r_tensor_names = NULL, r_tensor_class = NULL; /* an R torch_tensor: list(.py = ) */

static void *library = RTLD_DEFAULT;

static void *find(const char *name, int *ok) {
  void *address = dlsym(library, name);
  if (address == NULL) *ok = 0;
  return address;
}

/* The PyObject* inside one of reticulate's wrappers, or NULL if `x` is not one. A callable
 * comes to R as an R function whose `py_object` attribute is the wrapper. */
static PyObject *object_of(SEXP x) {
  if (TYPEOF(x) == CLOSXP) x = Rf_getAttrib(x, sym_py_object);
  if (TYPEOF(x) != ENVSXP) return NULL;
  SEXP pointer = Rf_findVarInFrame(x, sym_pyobj);
  if (TYPEOF(pointer) != EXTPTRSXP) return NULL;
  return (PyObject *) R_ExternalPtrAddr(pointer);
}

/* tb_call_init(tensor_type, tensor_example, rbridge, libpython): TRUE when the C API was
 * found, in the libpython that reticulate already loaded (RTLD_NOLOAD: never a second one). */
SEXP tb_call_init(SEXP type, SEXP example, SEXP module, SEXP libpython) {
  int ok = 1;
  if (TYPEOF(libpython) == STRSXP && XLENGTH(libpython) == 1) {
    void *handle = dlopen(CHAR(STRING_ELT(libpython, 0)), RTLD_LAZY | RTLD_NOLOAD);
    if (handle != NULL) library = handle;
  }
  CallOneArg = (PyObject * (*)(PyObject *, PyObject *)) find("PyObject_CallOneArg", &ok);
  GILEnsure = (GILState(*)(void)) find("PyGILState_Ensure", &ok);
  GILRelease = (void (*)(GILState)) find("PyGILState_Release", &ok);
  DecRef = (void (*)(PyObject *)) find("Py_DecRef", &ok);
  IncRef = (void (*)(PyObject *)) find("Py_IncRef", &ok);
  ErrFetch = (void (*)(PyObject **, PyObject **, PyObject **)) find("PyErr_Fetch", &ok);
  ErrNormalize =
      (void (*)(PyObject **, PyObject **, PyObject **)) find("PyErr_NormalizeException", &ok);
  ExcSetTraceback = (int (*)(PyObject *, PyObject *)) find("PyException_SetTraceback", &ok);
  SetAttrString = (int (*)(PyObject *, const char *, PyObject *)) find("PyObject_SetAttrString",
                                                                     &ok);
  if (sym_pyobj == NULL) {
    sym_pyobj = Rf_install("pyobj");
    sym_convert = Rf_install("convert");
    sym_py_object = Rf_install("py_object");
    r_tensor_names = Rf_mkString(".py");
    R_PreserveObject(r_tensor_names);
    r_tensor_class = Rf_mkString("torch_tensor");
    R_PreserveObject(r_tensor_class);
  }
  PyObject *t = object_of(type), *m = object_of(module);
  if (!ok || t == NULL || m == NULL || object_of(example) == NULL) return Rf_ScalarLogical(0);
  GILState gil = GILEnsure();
  IncRef(t);
  IncRef(m);
  if (tensor_type != NULL) DecRef(tensor_type);
  if (bridge_module != NULL) DecRef(bridge_module);
  GILRelease(gil);
  tensor_type = t;
  bridge_module = m;
  if (tensor_class != NULL) R_ReleaseObject(tensor_class);
  tensor_class = Rf_getAttrib(example, R_ClassSymbol);
  R_PreserveObject(tensor_class);
  return Rf_ScalarLogical(1);
}

static void finalize(SEXP pointer) {
  PyObject *object = (PyObject *) R_ExternalPtrAddr(pointer);
  if (object == NULL) return;
  GILState gil = GILEnsure();
  DecRef(object);
  GILRelease(gil);
  R_ClearExternalPtr(pointer);
}

/* A wrapper like reticulate's for `object` (a new reference, which it takes over). */
static SEXP wrap(PyObject *object, SEXP klass) {
  SEXP env = PROTECT(R_NewEnv(R_EmptyEnv, FALSE, 2));
  SEXP pointer = PROTECT(R_MakeExternalPtr(object, R_NilValue, R_NilValue));
  R_RegisterCFinalizerEx(pointer, finalize, TRUE);
  Rf_defineVar(sym_pyobj, pointer, env);
  SEXP convert = PROTECT(Rf_ScalarLogical(0)); /* defineVar allocates: keep it protected */
  Rf_defineVar(sym_convert, convert, env);
  Rf_setAttrib(env, R_ClassSymbol, klass);
  UNPROTECT(3);
  return env;
}

/* fn(arg) for the Python objects inside reticulate's wrappers; NULL with the exception
 * stored for R's handler (see the note at the top). */
static PyObject *call(PyObject *callable, PyObject *arg, int *is_tensor) {
  GILState gil = GILEnsure();
  PyObject *result = CallOneArg(callable, arg);
  if (result == NULL) {
    PyObject *type = NULL, *value = NULL, *traceback = NULL;
    ErrFetch(&type, &value, &traceback);
    ErrNormalize(&type, &value, &traceback);
    if (value != NULL) {
      if (traceback != NULL) ExcSetTraceback(value, traceback);
      SetAttrString(bridge_module, "_last_error", value);
    }
    if (type != NULL) DecRef(type);
    if (value != NULL) DecRef(value);
    if (traceback != NULL) DecRef(traceback);
  } else {
    *is_tensor = ((ObjectHead *) result)->type == tensor_type;
  }
  GILRelease(gil);
  return result;
}

/* The Python tensor inside an R torch_tensor (list(.py = wrapper)), or NULL. */
static PyObject *tensor_of(SEXP x) {
  if (TYPEOF(x) != VECSXP || XLENGTH(x) < 1 || !Rf_inherits(x, "torch_tensor")) return NULL;
  SEXP names = Rf_getAttrib(x, R_NamesSymbol);
  if (TYPEOF(names) != STRSXP || strcmp(CHAR(STRING_ELT(names, 0)), ".py") != 0) return NULL;
  return object_of(VECTOR_ELT(x, 0));
}

/* tb_call_tensor(fn, x): the traced call `fn(x)` for an R torch_tensor `x`, all of it here
 * (R's share of a call is the closure that calls this). Returns an R torch_tensor for a
 * tensor result; reticulate's kind of wrapper with class "python.builtin.object" for
 * another result (R has reticulate wrap that one properly); FALSE when Python raised (the
 * exception is stored for R's handler); NULL when this path does not apply (not started,
 * or `x` is not a torch_tensor), and R calls through reticulate. */
SEXP tb_call_tensor(SEXP fn, SEXP x) {
  PyObject *callable = object_of(fn), *arg = tensor_of(x);
  if (tensor_type == NULL || callable == NULL || arg == NULL) return R_NilValue;
  int is_tensor = 0;
  PyObject *result = call(callable, arg, &is_tensor);
  if (result == NULL) return Rf_ScalarLogical(0);
  if (!is_tensor) {
    SEXP klass = PROTECT(Rf_mkString("python.builtin.object"));
    SEXP out = wrap(result, klass);
    UNPROTECT(1);
    return out;
  }
  SEXP py = PROTECT(wrap(result, tensor_class));
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 1));
  SET_VECTOR_ELT(out, 0, py);
  Rf_setAttrib(out, R_NamesSymbol, r_tensor_names);
  Rf_setAttrib(out, R_ClassSymbol, r_tensor_class);
  UNPROTECT(2);
  return out;
}

/* tb_call_stop(): R calls through reticulate from now on (until tb_call_init again). */
SEXP tb_call_stop(void) {
  if (tensor_type != NULL) {
    GILState gil = GILEnsure();
    DecRef(tensor_type);
    DecRef(bridge_module);
    GILRelease(gil);
    tensor_type = bridge_module = NULL;
  }
  return R_NilValue;
}

static const R_CallMethodDef methods[] = {
    {"tb_call_init", (DL_FUNC) &tb_call_init, 4},
    {"tb_call_tensor", (DL_FUNC) &tb_call_tensor, 2},
    {"tb_call_stop", (DL_FUNC) &tb_call_stop, 0},
    {NULL, NULL, 0}};

void R_init_tracebridge(DllInfo *dll) {
  R_registerRoutines(dll, NULL, methods, NULL, NULL);
  R_useDynamicSymbols(dll, FALSE);
}
