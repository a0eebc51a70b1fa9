/* R functions that Python calls back (a scheduler's lr_lambda, a tensor hook, the closure
 * of an optimizer's step(), the forward of an R module run from Python, the function
 * jit_trace() records), as Python callables made here.
 *
 * Note: why. reticulate's r_to_py(<function>) makes a Python function that converts every
 * argument with py_to_r() and the result with r_to_py(), through R's S3 dispatch, on every
 * call (~100-200 us a call, benchmarks/bench_r.R). The callable made here is a Python
 * builtin function (PyCFunction_NewEx) whose `self` is a capsule holding the R function:
 * it converts the arguments with the C path's converters (convert.c), calls R, and
 * converts the result back, all in C. What the R function checks and the messages it
 * gives stay in R (R/callbacks.R), so both paths give the same results and errors.
 *
 * Note: lifetime. The R function is preserved (R_PreserveObject) when the callable is made
 * and released by the capsule's destructor, when Python drops the callable; R never holds
 * the callable's Python object beyond the wrapper it returns (released by its finalizer).
 * A destructor run on a thread other than R's (Python may free the callable anywhere)
 * queues the release for the next callable made on R's thread.
 *
 * Note: errors and interrupts. R runs inside R_ToplevelExec() (R_tryEvalSilent() for the
 * function itself), so no R error or interrupt jumps over Python's frames. The R wrapper
 * keeps the R condition (`.tb$pending_r_error`, R/callbacks.R); Python gets a
 * RuntimeError that carries the R message (a KeyboardInterrupt for an interrupt), and
 * when the Python call returns to R, R raises the kept condition itself
 * (rethrow_python()). R is single threaded: a call from another thread (autograd's device
 * threads run hooks of CUDA tensors) is refused with a RuntimeError that says so.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"

/* CPython's PyMethodDef (stable across 3.x). */
typedef struct {
  const char *name;
  PyObject *(*meth)(PyObject *, PyObject *, PyObject *);
  int flags;
  const char *doc;
} MethodDef;

#define METH_VARARGS 0x0001
#define METH_KEYWORDS 0x0002

typedef struct {
  SEXP fn;     /* the R function, preserved while the callable lives */
  char *what;  /* names the function in messages: "lr_lambda()" */
} Callback;

static const char *capsule_name = "tracebridge.r_function";
static pthread_t r_thread;
static int r_thread_known = 0;
static SEXP helpers = NULL; /* list(arg_from_py, value_to_py): R's conversions of the rest */
static SEXP tb_state = NULL; /* the package's .tb (its pending_r_error) */
static SEXP sym_pending = NULL;  /* pending_r_error */
static double callback_calls = 0, callbacks_live = 0;

/* Releases queued by destructors that ran off R's thread. */
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static Callback **queued = NULL;
static size_t n_queued = 0, cap_queued = 0;

static int on_r_thread(void) { return r_thread_known && pthread_equal(pthread_self(), r_thread); }

static void callback_free(Callback *cb) {
  callbacks_live--;
  R_ReleaseObject(cb->fn);
  free(cb->what);
  free(cb);
}

static void drain_queue(void) {
  pthread_mutex_lock(&queue_lock);
  for (size_t i = 0; i < n_queued; i++) callback_free(queued[i]);
  n_queued = 0;
  pthread_mutex_unlock(&queue_lock);
}

static void capsule_destructor(PyObject *capsule) {
  Callback *cb = (Callback *) py.CapsuleGetPointer(capsule, capsule_name);
  if (cb == NULL) return;
  if (on_r_thread()) {
    callback_free(cb);
    return;
  }
  pthread_mutex_lock(&queue_lock);
  if (n_queued == cap_queued) {
    size_t cap = cap_queued ? 2 * cap_queued : 16;
    Callback **grown = realloc(queued, cap * sizeof(Callback *));
    if (grown != NULL) {
      queued = grown;
      cap_queued = cap;
    }
  }
  if (n_queued < cap_queued) queued[n_queued++] = cb; /* else kept: a leak, never a crash */
  pthread_mutex_unlock(&queue_lock);
}

/* ---- conversions -------------------------------------------------------------------- */

/* R's conversion of `value` (helpers[which]); NULL (C's) when it raised: its condition is
 * kept as the function's own are (R/callbacks.R). */
static SEXP eval_helper(int which, SEXP value) {
  SEXP call = PROTECT(Rf_lang2(VECTOR_ELT(helpers, which), value));
  int failed = 0;
  SEXP out = R_tryEvalSilent(call, R_GlobalEnv, &failed);
  UNPROTECT(1);
  return failed ? NULL : out;
}

static int is_type(PyObject *o, PyObject *type) { return PY_TYPE(o) == type; }

/* A Python argument as R's from_py() gives it: a tensor wrapped, a plain scalar or string
 * converted, a tuple or list as an R list; the rest by R (from_py(), through a wrapper).
 * Runs inside R_ToplevelExec(): R errors stop here. */
static SEXP arg_to_r(PyObject *o, int depth) {
  SEXP out;
  if (is_type(o, torch_.tensor_type)) {
    py.IncRef(o);
    return wrap_result(o);
  }
  if (is_type(o, py.UnicodeType)) {
    const char *s = py_utf8_plain(o); /* NULL: not UTF-8 or a NUL inside: R decides */
    if (s != NULL) return Rf_ScalarString(Rf_mkCharCE(s, CE_UTF8));
  } else if (depth < TB_MAX_DEPTH && (is_type(o, py.TupleType) || is_type(o, py.ListType))) {
    int list = is_type(o, py.ListType);
    ptrdiff_t n = list ? py.ListSize(o) : py.TupleSize(o);
    out = PROTECT(Rf_allocVector(VECSXP, n));
    for (ptrdiff_t i = 0; i < n; i++) {
      SEXP item = arg_to_r(list ? py.ListGetItem(o, i) : py.TupleGetItem(o, i), depth + 1);
      if (item == NULL) {
        UNPROTECT(1);
        return NULL;
      }
      SET_VECTOR_ELT(out, i, item);
    }
    UNPROTECT(1);
    return out;
  } else if (result_to_r(o, R_R, &out) == CONV_OK) {
    return out;
  }
  py.IncRef(o);
  SEXP wrapper = PROTECT(wrap(o, object_class));
  out = eval_helper(0, wrapper);
  UNPROTECT(1);
  return out; /* NULL: R raised */
}

static int plain(SEXP v) { return !OBJECT(v) && Rf_getAttrib(v, R_DimSymbol) == R_NilValue; }

/* An R result as R's to_py() gives it, without R where it is a tensor, a traced integer, a
 * Python object, NULL, one plain number, logical or string, or a list of those (a tuple,
 * or a dict when every element is named). NULL: a Python error, or R must convert `v`
 * (`*r_needed` set). Never calls R. */
static PyObject *value_to_py(SEXP v, int *r_needed, int depth) {
  PyObject *o = tensor_of(v);
  if (o == NULL) o = py_field_of(v, "torch_sym_int");
  if (o == NULL) o = object_of(v); /* a reticulate wrapper */
  if (o != NULL) {
    py.IncRef(o);
    return o;
  }
  if (v == R_NilValue) {
    py.IncRef(py.None);
    return py.None;
  }
  if (TYPEOF(v) == VECSXP && !OBJECT(v) && depth < TB_MAX_DEPTH) {
    R_xlen_t n = Rf_xlength(v);
    SEXP names = Rf_getAttrib(v, R_NamesSymbol);
    int named = names != R_NilValue;
    /* An NA name is the key "NA", as R's to_py() has it (nzchar(NA) is TRUE). */
    for (R_xlen_t i = 0; named && i < n; i++)
      if (STRING_ELT(names, i) != NA_STRING && CHAR(STRING_ELT(names, i))[0] == '\0') named = 0;
    PyObject *out = named ? py.DictNew() : py.TupleNew(n);
    if (out == NULL) return NULL;
    for (R_xlen_t i = 0; i < n; i++) {
      PyObject *item = value_to_py(VECTOR_ELT(v, i), r_needed, depth + 1);
      if (item == NULL) {
        py.DecRef(out);
        return NULL;
      }
      if (!named) {
        py.TupleSetItem(out, i, item); /* steals */
        continue;
      }
      SEXP name = STRING_ELT(names, i);
      PyObject *key = py.UnicodeFromString(name == NA_STRING ? "NA" : Rf_translateCharUTF8(name));
      int bad = key == NULL || py.DictSetItem(out, key, item) != 0;
      py_decref(key);
      py.DecRef(item);
      if (bad) {
        py.DecRef(out);
        return NULL;
      }
    }
    return out;
  }
  if (plain(v) && Rf_xlength(v) == 1 && TYPEOF(v) == STRSXP && STRING_ELT(v, 0) != NA_STRING)
    return py.UnicodeFromString(Rf_translateCharUTF8(STRING_ELT(v, 0)));
  if (plain(v) && Rf_xlength(v) == 1 &&
      (TYPEOF(v) == INTSXP || TYPEOF(v) == REALSXP || TYPEOF(v) == LGLSXP)) {
    PyObject *s = NULL;
    int status = scalar_to_py(v, &s); /* NA: R's conversion decides */
    if (status == CONV_OK) return s;
    if (status == CONV_PYERR) return NULL;
  }
  *r_needed = 1;
  return NULL;
}

/* ---- the call ------------------------------------------------------------------------ */

typedef struct {
  Callback *cb;
  PyObject *args, *kwargs;
  PyObject *result; /* set when all went well */
  int r_error;      /* the R function raised (its condition is kept in R) */
  int py_error;     /* a conversion raised in Python */
} CallData;

static void run_call(void *data) {
  CallData *d = (CallData *) data;
  ptrdiff_t n = py.TupleSize(d->args);
  /* A condition kept by an earlier call that Python caught is not this call's. */
  if (tb_state != NULL) {
    SEXP kept = Rf_findVarInFrame(tb_state, sym_pending);
    if (kept != R_UnboundValue && kept != R_NilValue) Rf_defineVar(sym_pending, R_NilValue, tb_state);
  }
  ptrdiff_t nk = d->kwargs == NULL ? 0 : py.DictSize(d->kwargs);
  SEXP call = PROTECT(Rf_allocVector(LANGSXP, 1 + n + nk));
  SETCAR(call, d->cb->fn);
  SEXP node = CDR(call);
  for (ptrdiff_t i = 0; i < n; i++, node = CDR(node)) {
    SEXP arg = arg_to_r(py.TupleGetItem(d->args, i), 0);
    if (arg == NULL) goto r_failed;
    SETCAR(node, arg);
  }
  ptrdiff_t pos = 0;
  PyObject *key, *value;
  while (nk > 0 && py.DictNext(d->kwargs, &pos, &key, &value)) {
    const char *name = py.UnicodeAsUTF8(key);
    if (name == NULL) {
      d->py_error = 1;
      UNPROTECT(1);
      return;
    }
    SET_TAG(node, Rf_install(name));
    SEXP arg = arg_to_r(value, 0);
    if (arg == NULL) goto r_failed;
    SETCAR(node, arg);
    node = CDR(node);
  }
  int failed = 0;
  callback_calls++;
  SEXP out = R_tryEvalSilent(call, R_GlobalEnv, &failed);
  if (failed) {
    d->r_error = 1;
    UNPROTECT(1);
    return;
  }
  PROTECT(out);
  int r_needed = 0;
  PyObject *result = value_to_py(out, &r_needed, 0);
  if (result == NULL && r_needed) {
    SEXP converted = eval_helper(1, out);
    if (converted == NULL) {
      d->r_error = 1;
      UNPROTECT(2);
      return;
    }
    PyObject *o = object_of(converted); /* to_py() answers a Python object */
    if (o == NULL) {
      d->r_error = 1;
      UNPROTECT(2);
      return;
    }
    py.IncRef(o);
    result = o;
  }
  if (result == NULL && !r_needed) d->py_error = py.ErrOccurred() != NULL;
  d->result = result;
  UNPROTECT(2);
  return;
r_failed: /* R's conversion of an argument raised */
  d->r_error = 1;
  UNPROTECT(1);
}

/* The message of the condition R kept, or R's error text where the call changed it from
 * `before`; an interrupt sets `*interrupt`. */
static const char *r_error_message(int *interrupt, const char *before) {
  *interrupt = 0;
  SEXP cond = tb_state == NULL ? R_NilValue : Rf_findVarInFrame(tb_state, sym_pending);
  if (cond != R_UnboundValue && cond != R_NilValue) {
    if (Rf_inherits(cond, "interrupt")) {
      *interrupt = 1;
      return "interrupted in R";
    }
    if (TYPEOF(cond) == VECSXP) {
      SEXP names = Rf_getAttrib(cond, R_NamesSymbol);
      for (R_xlen_t i = 0; i < Rf_xlength(cond) && names != R_NilValue; i++) {
        SEXP m = VECTOR_ELT(cond, i);
        if (strcmp(CHAR(STRING_ELT(names, i)), "message") == 0 && TYPEOF(m) == STRSXP &&
            Rf_xlength(m) >= 1)
          return Rf_translateCharUTF8(STRING_ELT(m, 0));
      }
    }
  }
  /* No condition kept: R's own error text where this call changed it (an error no handler
   * saw, e.g. C stack usage); else the function left by a jump that is no error (e.g.
   * invokeRestart("abort")), and the buffer holds an older, unrelated error. */
  if (strncmp(R_curErrorBuf(), before, 255) != 0) return R_curErrorBuf();
  return "the R function stopped without an R error (e.g. invokeRestart(\"abort\"))";
}

static PyObject *callback_call(PyObject *capsule, PyObject *args, PyObject *kwargs) {
  Callback *cb = (Callback *) py.CapsuleGetPointer(capsule, capsule_name);
  if (cb == NULL) return NULL;
  if (!on_r_thread()) {
    py.ErrSetString(*py.ExcRuntimeError,
                    "An R function was called from a thread other than R's (R runs on one "
                    "thread only; e.g. autograd runs the hooks of CUDA tensors on its own "
                    "threads). Call it on R's thread, or use a Python function there.");
    return NULL;
  }
  CallData d = {cb, args, kwargs, NULL, 0, 0};
  char before[256]; /* R's error text before the call, to tell a new one from a stale one */
  snprintf(before, sizeof before, "%s", R_curErrorBuf());
  if (!R_ToplevelExec(run_call, &d) && !d.r_error) d.r_error = 1;
  if (d.result != NULL) {
    /* An error R's conversion left set (reticulate's, of an int beyond 64 bits) is not
     * this call's: returning with it set would be Python's SystemError. */
    if (py.ErrOccurred() != NULL) py.ErrClear();
    return d.result;
  }
  if (d.py_error && py.ErrOccurred() != NULL) return NULL;
  int interrupt = 0;
  const char *message = r_error_message(&interrupt, before);
  size_t size = strlen(message) + strlen(cb->what) + 64;
  char *text = malloc(size);
  if (text == NULL) {
    py.ErrSetString(*py.ExcRuntimeError, message);
    return NULL;
  }
  snprintf(text, size, "R error in %s: %s", cb->what, message);
  size_t len = strlen(text);
  while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' ')) text[--len] = '\0';
  py.ErrSetString(interrupt ? *py.ExcKeyboardInterrupt : *py.ExcRuntimeError, text);
  free(text);
  return NULL;
}

static MethodDef callback_def = {"r_function", callback_call, METH_VARARGS | METH_KEYWORDS,
                                 "An R function, called from Python (tracebridge)."};

/* tb_callback_init(helpers, tb): R's conversions of what C leaves (list(arg_from_py,
 * value_to_py)) and the package's state environment; records R's thread. */
SEXP tb_callback_init(SEXP fns, SEXP tb) {
  if (helpers != NULL) R_ReleaseObject(helpers);
  helpers = fns;
  R_PreserveObject(helpers);
  if (tb_state == NULL) {
    tb_state = tb;
    R_PreserveObject(tb_state);
  }
  sym_pending = Rf_install("pending_r_error");
  r_thread = pthread_self();
  r_thread_known = 1;
  return R_NilValue;
}

/* tb_r_function(fn, what): a Python callable that calls the R function `fn` (a wrapper of
 * class "python.builtin.object"); `.tb_fallback` where the C paths are not on. */
SEXP tb_r_function(SEXP fn, SEXP what) {
  if (!py_ready || helpers == NULL || !on_r_thread() || !Rf_isFunction(fn) ||
      TYPEOF(what) != STRSXP || Rf_xlength(what) != 1)
    return sentinel_fallback;
  drain_queue();
  Callback *cb = malloc(sizeof(Callback));
  const char *name = Rf_translateCharUTF8(STRING_ELT(what, 0));
  char *copy = malloc(strlen(name) + 1);
  if (cb == NULL || copy == NULL) {
    free(cb);
    free(copy);
    Rf_error("tracebridge: out of memory making a Python callable for an R function");
  }
  strcpy(copy, name);
  cb->fn = fn;
  cb->what = copy;
  R_PreserveObject(fn);
  callbacks_live++;
  GILState gil = py.GILEnsure();
  PyObject *capsule = py.CapsuleNew(cb, capsule_name, capsule_destructor);
  PyObject *callable = NULL;
  if (capsule == NULL) {
    callback_free(cb);
  } else {
    callable = py.CFunctionNewEx(&callback_def, capsule, NULL);
    py.DecRef(capsule); /* the callable holds it; dropping the last reference frees cb */
  }
  if (callable == NULL) {
    store_error();
    py.GILRelease(gil);
    return sentinel_error;
  }
  py.GILRelease(gil);
  return wrap(callable, object_class);
}

/* tb_r_function_calls(): how many times Python called an R function through C, and how
 * many such functions are held for Python now (tests). */
SEXP tb_r_function_calls(void) {
  SEXP out = PROTECT(Rf_allocVector(REALSXP, 2));
  REAL(out)[0] = callback_calls;
  REAL(out)[1] = callbacks_live;
  UNPROTECT(1);
  return out;
}
