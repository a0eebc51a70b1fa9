/* The rows of the surface table (inst/surface.tsv), operators, module calls and `[` in C.
 *
 * Note: the protocol with R. Each entry point returns the R result, or one of two symbols:
 * `.tb_fallback` (C did nothing that shows: R runs its own path, which gives the same
 * result or the same error) or `.tb_error` (Python raised; the exception is stored and R
 * raises it, see pyapi.c). A result C cannot finish comes back as a wrapper of class
 * "python.builtin.object" (an environment), which R has reticulate wrap and converts as
 * before (c_other() in R/python.R). R tests the answer with is.symbol() and
 * is.environment(), which cost next to nothing.
 *
 * Arguments are read from the R function's frame and forced before any Python object is
 * made, so an R error while forcing one (an unknown variable) leaves nothing to release.
 */
#include <stdlib.h>
#include <string.h>

#include "convert.h"

typedef struct {
  SEXP sym;      /* the R argument */
  PyObject *key; /* its Python keyword */
  int kind, positional, dots, is_dim, is_keepdim;
} ArgSpec;

typedef struct {
  PyObject *fn;
  int n, result, first;
  int ignore_at; /* the `ignore_index` argument, or -1 */
  int class_at;  /* the class targets argument (K_CLASS_INDEX), or -1 */
  ArgSpec *args;
} OpSpec;

/* Rows with at most this many arguments keep their values on the C stack (op_call()). */
#define ARGS_ON_STACK 16

/* Calls of table rows that C made (tests check that the rows they expect in C are). */
static double op_calls = 0;

SEXP tb_op_calls(void) { return Rf_ScalarReal(op_calls); }

/* The compiled rows, by row number (1-based, as R numbers them). */
static OpSpec **row_ops = NULL;
static int n_rows = 0;

static void op_release(OpSpec *op) {
  if (op == NULL) return;
  if (py_ready) {
    GILState gil = py.GILEnsure();
    py_decref(op->fn);
    for (int i = 0; i < op->n; i++) py_decref(op->args[i].key);
    py.GILRelease(gil);
  }
  free(op->args);
  free(op);
}

/* tb_op_compile(i, fn, names, pynames, kinds, positional, dots, result, first): row `i`,
 * compiled for tb_op_call(); FALSE where C can not start. */
SEXP tb_op_compile(SEXP row, SEXP fn, SEXP names, SEXP pynames, SEXP kinds, SEXP positional,
                   SEXP dots, SEXP result, SEXP first) {
  PyObject *callable = object_of(fn);
  int at = Rf_asInteger(row);
  if (!py_ready || callable == NULL || at < 1) return Rf_ScalarLogical(0);
  if (at > n_rows) {
    OpSpec **grown = realloc(row_ops, at * sizeof(OpSpec *));
    if (grown == NULL) return Rf_ScalarLogical(0);
    for (int k = n_rows; k < at; k++) grown[k] = NULL;
    row_ops = grown;
    n_rows = at;
  }
  int n = LENGTH(names);
  OpSpec *op = calloc(1, sizeof(OpSpec));
  ArgSpec *args = calloc(n > 0 ? n : 1, sizeof(ArgSpec));
  if (op == NULL || args == NULL) {
    free(op);
    free(args);
    return Rf_ScalarLogical(0);
  }
  op->args = args;
  op->n = n;
  op->result = INTEGER(result)[0];
  op->first = LOGICAL(first)[0];
  op->ignore_at = -1;
  op->class_at = -1;
  GILState gil = py.GILEnsure();
  py.IncRef(callable);
  op->fn = callable;
  int ok = 1;
  for (int i = 0; i < n; i++) {
    const char *name = CHAR(STRING_ELT(names, i));
    args[i].sym = Rf_install(name);
    args[i].key = py.UnicodeIntern(CHAR(STRING_ELT(pynames, i)));
    if (args[i].key == NULL) ok = 0;
    args[i].kind = INTEGER(kinds)[i];
    args[i].positional = LOGICAL(positional)[i];
    args[i].dots = LOGICAL(dots)[i];
    args[i].is_dim = strcmp(name, "dim") == 0;
    args[i].is_keepdim = strcmp(name, "keepdim") == 0;
    if (strcmp(name, "ignore_index") == 0) op->ignore_at = i;
    if (args[i].kind == K_CLASS_INDEX) op->class_at = i;
  }
  py.GILRelease(gil);
  op_release(row_ops[at - 1]);
  row_ops[at - 1] = NULL;
  if (!ok) {
    op_release(op);
    return Rf_ScalarLogical(0);
  }
  row_ops[at - 1] = op;
  return Rf_ScalarLogical(1);
}

/* The value of argument `sym` in `env`, forced; NULL where C leaves the call to R. */
static SEXP arg_value(SEXP env, SEXP sym) {
  SEXP v = Rf_findVarInFrame(env, sym);
  if (v == R_UnboundValue || v == R_MissingArg) return NULL;
  if (TYPEOF(v) == PROMSXP) v = Rf_eval(v, env);
  if (v == R_MissingArg) return NULL;
  return v;
}

/* `...` as an R list (list(...)); NULL where one is named (R decides those). */
static SEXP dots_value(SEXP env) {
  SEXP d = Rf_findVarInFrame(env, R_DotsSymbol);
  if (d == R_UnboundValue) return NULL;
  if (d == R_MissingArg) return Rf_allocVector(VECSXP, 0);
  int n = 0;
  for (SEXP p = d; p != R_NilValue; p = CDR(p)) {
    if (TAG(p) != R_NilValue) return NULL;
    n++;
  }
  SEXP list = PROTECT(Rf_allocVector(VECSXP, n));
  int i = 0;
  for (SEXP p = d; p != R_NilValue; p = CDR(p), i++) {
    SEXP v = CAR(p);
    if (TYPEOF(v) == PROMSXP) v = Rf_eval(v, env);
    if (v == R_MissingArg) {
      UNPROTECT(1);
      return NULL;
    }
    SET_VECTOR_ELT(list, i, v);
  }
  UNPROTECT(1);
  return list;
}

/* fn(*args, **kwargs) and the result converted by `kind`; steals args and kwargs. */
static SEXP call_and_convert(PyObject *fn, PyObject *args, PyObject *kwargs, int kind) {
  PyObject *result = py.Call(fn, args, kwargs);
  py.DecRef(args);
  py_decref(kwargs);
  if (result == NULL) {
    store_error();
    return sentinel_error;
  }
  SEXP out = R_NilValue;
  int status = result_to_r(result, kind, &out);
  if (status == CONV_FALLBACK) return wrap(result, object_class); /* steals result */
  py.DecRef(result);
  if (status == CONV_PYERR) {
    store_error();
    return sentinel_error;
  }
  return out;
}

/* The row's call for the arguments in `env` (the frame of the surface function); `self`,
 * where not NULL, is the first argument (a method bound by `$`). */
static SEXP op_call(SEXP row, SEXP env, SEXP self) {
  int at = Rf_asInteger(row);
  if (!c_path_on() || at < 1 || at > n_rows || row_ops[at - 1] == NULL) return sentinel_fallback;
  OpSpec *op = row_ops[at - 1];
  /* The arguments' values: each is kept alive by the frame (a promise holds the value it
   * was forced to), `self` by the caller, and a `...` list here; so a row of up to
   * ARGS_ON_STACK arguments needs no R allocation for them (two fewer a call). */
  SEXP on_stack[ARGS_ON_STACK];
  SEXP *values = op->n <= ARGS_ON_STACK ? on_stack : (SEXP *) R_alloc(op->n, sizeof(SEXP));
  int protected = 0;
  for (int i = 0; i < op->n; i++) {
    SEXP v = (i == 0 && self != NULL) ? self
             : op->args[i].dots ? dots_value(env) : arg_value(env, op->args[i].sym);
    if (v == NULL) {
      UNPROTECT(protected);
      return sentinel_fallback;
    }
    if (op->args[i].dots) {
      PROTECT(v);
      protected++;
    }
    values[i] = v;
  }
  GILState gil = py.GILEnsure();
  PyObject *pos_stack[ARGS_ON_STACK];
  PyObject **pos = op->n <= ARGS_ON_STACK ? pos_stack
                   : (PyObject **) R_alloc(op->n, sizeof(PyObject *));
  int np = 0, first = op->first, no_dim = 0, status = CONV_OK;
  PyObject *kwargs = NULL;
  for (int i = 0; i < op->n && status == CONV_OK; i++) {
    ArgSpec *a = &op->args[i];
    SEXP v = values[i];
    /* Python refuses `keepdim` without `dim`; NULL dim means "all elements". */
    if (no_dim && a->is_keepdim) continue;
    if (v == R_NilValue) {
      if (a->is_dim) no_dim = 1;
      first = 0;
      continue;
    }
    PyObject *o = NULL;
    long long ign;
    if (a->kind == K_CLASS_INDEX)
      status = class_index_to_py(v, op->ignore_at < 0 ? R_NilValue : values[op->ignore_at],
                                 1, &o);
    else if (i == op->ignore_at && op->class_at >= 0 && whole_int(v, &ign) && ign < 0)
      /* ignore_index_arg(): a negative one is shifted with the targets. */
      status = (o = py.LongFromLongLong(ign - 1)) == NULL ? CONV_PYERR : CONV_OK;
    else
      status = a->kind == K_OTHER ? CONV_FALLBACK : to_py_kind(v, a->kind, a->dots, &o);
    if (status != CONV_OK) break;
    if (first || a->positional) {
      pos[np++] = o;
    } else {
      if (kwargs == NULL) kwargs = py.DictNew();
      if (kwargs == NULL || py.DictSetItem(kwargs, a->key, o) != 0) status = CONV_PYERR;
      py.DecRef(o);
    }
    first = 0;
  }
  PyObject *args = status == CONV_OK ? py.TupleNew(np) : NULL;
  if (status == CONV_OK && args == NULL) status = CONV_PYERR;
  if (status != CONV_OK) {
    for (int k = 0; k < np; k++) py.DecRef(pos[k]);
    py_decref(kwargs);
    if (status == CONV_PYERR) store_error();
    py.GILRelease(gil);
    UNPROTECT(protected);
    return status == CONV_PYERR ? sentinel_error : sentinel_fallback;
  }
  for (int k = 0; k < np; k++) py.TupleSetItem(args, k, pos[k]); /* steals */
  op_calls++;
  SEXP out = PROTECT(call_and_convert(op->fn, args, kwargs, op->result));
  py.GILRelease(gil);
  UNPROTECT(protected + 1);
  return out;
}

/* tb_op_call(i, env): row `i` called with the arguments in `env`. */
SEXP tb_op_call(SEXP row, SEXP env) { return op_call(row, env, NULL); }

/* tb_op_call_self(i, env, self): the same for a tensor method, `self` its tensor (from
 * .External2(tb_op_self_here, ...), src/call.c). */
SEXP tb_op_call_self(SEXP row, SEXP env, SEXP self) { return op_call(row, env, self); }

/* Note: the closures of the rows. Every row's function has the same body (a template in
 * R/surface.R, byte-compiled when the package is installed) and differs only in its formals
 * and its environment, which holds `.row`, the row's number. tb_closure() makes one from
 * the template's compiled body: R's JIT never compiles closures this small, and a body
 * made at load with body<- runs in the AST interpreter, which looks up every name
 * (`.Call`, `is.symbol`, ...) through the environments on each call.
 *
 * A tensor method, `x$name`, is the row's method closure (kept in `.tb$bound`, see
 * tb_method_init()) with an environment holding `self`, made here on each `$`: an
 * environment and a closure, and nothing evaluated. */

/* tb_closure(formals, template, env): a closure with `formals` (a pairlist), the body of
 * the closure `template`, and environment `env`. */
SEXP tb_closure(SEXP formals, SEXP template, SEXP env) {
  if (TYPEOF(template) != CLOSXP || TYPEOF(env) != ENVSXP ||
      (formals != R_NilValue && TYPEOF(formals) != LISTSXP))
    Rf_error("tb_closure(): a pairlist, a closure and an environment are needed.");
  SEXP f = PROTECT(Rf_allocSExp(CLOSXP));
  SET_FORMALS(f, formals);
  SET_BODY(f, BODY(template));
  SET_CLOENV(f, env);
  UNPROTECT(1);
  return f;
}

static SEXP bound_env = NULL;

/* tb_method_init(bound): the environment of the rows' method closures, by method name. */
SEXP tb_method_init(SEXP bound) {
  if (TYPEOF(bound) != ENVSXP) Rf_error("tb_method_init(): an environment is needed.");
  if (bound_env != NULL) R_ReleaseObject(bound_env);
  bound_env = bound;
  R_PreserveObject(bound_env);
  return R_NilValue;
}

/* tb_method(x, name): the method `name` of tensor `x` (`x$name`), a closure whose
 * environment holds `self = x`; NULL where `name` is no row's method (R looks at fields). */
SEXP tb_method(SEXP x, SEXP name) {
  if (bound_env == NULL || TYPEOF(name) != STRSXP || Rf_xlength(name) != 1 ||
      STRING_ELT(name, 0) == NA_STRING)
    return R_NilValue;
  SEXP proto = Rf_findVarInFrame(bound_env, Rf_installTrChar(STRING_ELT(name, 0)));
  if (TYPEOF(proto) != CLOSXP) return R_NilValue;
  SEXP env = PROTECT(R_NewEnv(CLOENV(proto), FALSE, 1));
  Rf_defineVar(sym_self, x, env);
  SEXP f = PROTECT(Rf_allocSExp(CLOSXP));
  SET_FORMALS(f, FORMALS(proto));
  SET_BODY(f, BODY(proto));
  SET_CLOENV(f, env);
  UNPROTECT(2);
  return f;
}

/* tb_binary(op, e1, e2): an R operator on tensors (Ops.torch_tensor), as
 * rbridge.binary() applies it. */
SEXP tb_binary(SEXP generic, SEXP e1, SEXP e2) {
  if (!c_path_on() || TYPEOF(generic) != STRSXP || Rf_xlength(generic) != 1)
    return sentinel_fallback;
  GILState gil = py.GILEnsure();
  PyObject *fn = py.DictGetItemString(torch_.binary_ops, CHAR(STRING_ELT(generic, 0)));
  PyObject *a = NULL, *b = NULL;
  if (fn == NULL || scalar_to_py(e1, &a) != CONV_OK) {
    py.GILRelease(gil);
    return sentinel_fallback;
  }
  if (scalar_to_py(e2, &b) != CONV_OK) {
    py.DecRef(a);
    py.GILRelease(gil);
    return sentinel_fallback;
  }
  PyObject *args = py.TupleNew(2);
  if (args == NULL) {
    py.DecRef(a);
    py.DecRef(b);
    store_error();
    py.GILRelease(gil);
    return sentinel_error;
  }
  py.TupleSetItem(args, 0, a);
  py.TupleSetItem(args, 1, b);
  PyObject *result = py.Call(fn, args, NULL);
  py.DecRef(args);
  SEXP out;
  if (result == NULL) {
    store_error();
    out = sentinel_error;
  } else {
    out = wrap_result(result); /* steals */
  }
  py.GILRelease(gil);
  return out;
}

/* tb_call_args(fn, args, during_trace): fn(*args) for a list of tensors (and NULLs, as
 * None): module forwards and traced calls. `during_trace`: TRUE where the call may run
 * while R traces (a traced module called inside another trace). */
SEXP tb_call_args(SEXP fn, SEXP args, SEXP during_trace) {
  if (!py_ready || (!LOGICAL(during_trace)[0] && tracing())) return sentinel_fallback;
  PyObject *callable = object_of(fn);
  if (callable == NULL || TYPEOF(args) != VECSXP || Rf_getAttrib(args, R_NamesSymbol) != R_NilValue)
    return sentinel_fallback;
  R_xlen_t n = Rf_xlength(args);
  for (R_xlen_t i = 0; i < n; i++) {
    SEXP v = VECTOR_ELT(args, i);
    if (v != R_NilValue && tensor_of(v) == NULL) return sentinel_fallback;
  }
  GILState gil = py.GILEnsure();
  SEXP out;
  PyObject *result;
  if (n == 1 && VECTOR_ELT(args, 0) != R_NilValue) {
    result = py.CallOneArg(callable, tensor_of(VECTOR_ELT(args, 0)));
  } else {
    PyObject *tuple = py.TupleNew(n);
    if (tuple == NULL) {
      store_error();
      py.GILRelease(gil);
      return sentinel_error;
    }
    for (R_xlen_t i = 0; i < n; i++) {
      SEXP v = VECTOR_ELT(args, i);
      PyObject *o = v == R_NilValue ? py.None : tensor_of(v);
      py.IncRef(o);
      py.TupleSetItem(tuple, i, o);
    }
    result = py.Call(callable, tuple, NULL);
    py.DecRef(tuple);
  }
  if (result == NULL) {
    store_error();
    out = sentinel_error;
  } else {
    out = wrap_result(result);
  }
  py.GILRelease(gil);
  return out;
}

/* The module's ignore_index for its class targets, as convert_forward_args() reads it: an
 * R integer where it is a negative Python int (no class: targets equal to it stay), NULL
 * otherwise. NULL with a Python error set where reading it failed. */
static SEXP forward_ignore_index(PyObject *module, int *failed) {
  *failed = 0;
  PyObject *ign = py.GetAttrString(module, "ignore_index");
  if (ign == NULL) {
    PyObject *type = NULL, *value = NULL, *traceback = NULL;
    py.ErrFetch(&type, &value, &traceback); /* no such attribute: no ignored class */
    py_decref(type);
    py_decref(value);
    py_decref(traceback);
    return R_NilValue;
  }
  int overflow = 0;
  long long v = PY_TYPE(ign) == py.LongType ? py.LongAsLongLongAndOverflow(ign, &overflow) : 0;
  py.DecRef(ign);
  if (py.ErrOccurred() != NULL) {
    *failed = 1;
    return R_NilValue;
  }
  return !overflow && v < 0 && v > -2147483648LL ? Rf_ScalarInteger((int) v) : R_NilValue;
}

/* One forward argument of kind `kind` (K_TENSOR, K_INDEX, K_CLASS_INDEX, K_LONG or
 * K_OTHER: a tensor as it is); NULL is None. */
static int forward_arg(SEXP v, int kind, SEXP ignore_index, PyObject **out) {
  if (v == R_NilValue) {
    py.IncRef(py.None);
    *out = py.None;
    return CONV_OK;
  }
  switch (kind) {
  case K_INDEX: return to_py_kind(v, K_INDEX, 0, out);
  case K_LONG: return to_py_kind(v, K_LONG, 0, out);
  case K_CLASS_INDEX: return class_index_to_py(v, ignore_index, 0, out);
  case K_TENSOR:
  case K_OTHER: return to_py_kind(v, K_TENSOR, 0, out);
  default: return CONV_FALLBACK;
  }
}

/* tb_call_forward(fn, args, names, kinds): the forward of a module whose arguments have
 * kinds (surface.tsv's `module(input:index)`; convert_forward_args() in R/nn.R), for a
 * list of arguments, named ones by keyword: each argument of kind tensor, index or
 * class_index (1-based, shifted here) is converted as R converts it, one without a kind
 * must be a tensor or NULL; any other kind, or any other value, answers `.tb_fallback`
 * and R does the call. `names`/`kinds`: the spec's argument names and kind codes. */
SEXP tb_call_forward(SEXP fn, SEXP args, SEXP names, SEXP kinds) {
  if (!c_path_on() || TYPEOF(args) != VECSXP || TYPEOF(names) != STRSXP ||
      TYPEOF(kinds) != INTSXP || Rf_xlength(names) != Rf_xlength(kinds))
    return sentinel_fallback;
  PyObject *callable = object_of(fn);
  if (callable == NULL) return sentinel_fallback;
  R_xlen_t n = Rf_xlength(args), nspec = Rf_xlength(kinds);
  SEXP arg_names = Rf_getAttrib(args, R_NamesSymbol);
  int need_ignore = 0;
  /* Every argument's kind, before any Python object is made. */
  int kind_of[64];
  if (n > 64) return sentinel_fallback;
  for (R_xlen_t i = 0; i < n; i++) {
    const char *name = arg_names == R_NilValue ? "" : CHAR(STRING_ELT(arg_names, i));
    int kind = K_OTHER;
    if (name[0] != '\0') {
      for (R_xlen_t k = 0; k < nspec; k++)
        if (strcmp(name, CHAR(STRING_ELT(names, k))) == 0) kind = INTEGER(kinds)[k];
    } else if (i < nspec) {
      kind = INTEGER(kinds)[i];
    }
    if (kind != K_OTHER && kind != K_TENSOR && kind != K_INDEX && kind != K_CLASS_INDEX &&
        kind != K_LONG)
      return sentinel_fallback;
    if (kind == K_CLASS_INDEX) need_ignore = 1;
    kind_of[i] = kind;
  }
  GILState gil = py.GILEnsure();
  int failed = 0;
  SEXP ignore_index = need_ignore ? forward_ignore_index(callable, &failed) : R_NilValue;
  PROTECT(ignore_index);
  PyObject *tuple = NULL, *kwargs = NULL, *result = NULL;
  int status = failed ? CONV_PYERR : CONV_OK;
  R_xlen_t npos = 0;
  for (R_xlen_t i = 0; i < n; i++)
    if (arg_names == R_NilValue || CHAR(STRING_ELT(arg_names, i))[0] == '\0') npos++;
  if (status == CONV_OK && (tuple = py.TupleNew(npos)) == NULL) status = CONV_PYERR;
  R_xlen_t at = 0;
  for (R_xlen_t i = 0; status == CONV_OK && i < n; i++) {
    PyObject *o = NULL;
    status = forward_arg(VECTOR_ELT(args, i), kind_of[i], ignore_index, &o);
    if (status != CONV_OK) break;
    const char *name = arg_names == R_NilValue ? "" : CHAR(STRING_ELT(arg_names, i));
    if (name[0] == '\0') {
      py.TupleSetItem(tuple, at++, o); /* steals */
      continue;
    }
    PyObject *key = py.UnicodeFromString(name);
    if (kwargs == NULL) kwargs = py.DictNew();
    if (key == NULL || kwargs == NULL || py.DictSetItem(kwargs, key, o) != 0) status = CONV_PYERR;
    py_decref(key);
    py.DecRef(o);
  }
  if (status == CONV_OK) {
    result = py.Call(callable, tuple, kwargs);
    if (result == NULL) status = CONV_PYERR;
  }
  py_decref(tuple);
  py_decref(kwargs);
  SEXP out;
  if (status == CONV_OK) {
    out = wrap_result(result); /* steals */
  } else if (status == CONV_PYERR) {
    store_error();
    out = sentinel_error;
  } else {
    out = sentinel_fallback;
  }
  UNPROTECT(1);
  py.GILRelease(gil);
  return out;
}

/* tb_grad_mode(enabled): sets autograd's grad mode (torch._C._set_grad_enabled) and returns
 * the mode it replaced; NA leaves it and only reads it. */
SEXP tb_grad_mode(SEXP enabled) {
  if (!c_path_on()) return sentinel_fallback;
  GILState gil = py.GILEnsure();
  PyObject *empty = py.TupleNew(0);
  PyObject *now = empty == NULL ? NULL : py.Call(torch_.is_grad, empty, NULL);
  py_decref(empty);
  if (now == NULL) {
    store_error();
    py.GILRelease(gil);
    return sentinel_error;
  }
  int before = now == py.True;
  py.DecRef(now);
  int want = LOGICAL(enabled)[0];
  if (want != NA_LOGICAL) {
    PyObject *r = py.CallOneArg(torch_.set_grad, want ? py.True : py.False);
    if (r == NULL) {
      store_error();
      py.GILRelease(gil);
      return sentinel_error;
    }
    py.DecRef(r);
  }
  py.GILRelease(gil);
  return Rf_ScalarLogical(before);
}

/* tb_call_method(x, name, args): x.name(*args, **kwargs) for the Python object inside a
 * reticulate wrapper or an R object with `.py` (optimizers, schedulers), the unnamed
 * elements of `args` by position and the named ones by keyword, converted as arg_py()
 * does (tensors, Python objects, dtypes, NULL, logicals, whole doubles as ints, I(x) as
 * a float). The
 * result as wrap_result() gives it; None is NULL. */
static SEXP call_method(SEXP x, SEXP name, SEXP args, int r_values) {
  if (!c_path_on() || TYPEOF(name) != STRSXP || Rf_xlength(name) != 1 || TYPEOF(args) != VECSXP)
    return sentinel_fallback;
  PyObject *self = self_of(x);
  if (self == NULL) return sentinel_fallback;
  SEXP arg_names = Rf_getAttrib(args, R_NamesSymbol);
  R_xlen_t n = Rf_xlength(args), npos = 0;
  for (R_xlen_t i = 0; i < n; i++) {
    if (arg_names == R_NilValue || CHAR(STRING_ELT(arg_names, i))[0] == '\0') {
      if (npos < i) return sentinel_fallback; /* a positional one after a keyword */
      npos++;
    }
  }
  GILState gil = py.GILEnsure();
  PyObject *tuple = py.TupleNew(npos), *kwargs = NULL;
  int status = tuple == NULL ? CONV_PYERR : CONV_OK;
  for (R_xlen_t i = 0; status == CONV_OK && i < n; i++) {
    PyObject *o = NULL;
    status = to_py_kind(VECTOR_ELT(args, i), K_ANY, 0, &o);
    if (status != CONV_OK) break;
    if (i < npos) {
      py.TupleSetItem(tuple, i, o); /* steals */
      continue;
    }
    PyObject *key = py.UnicodeFromString(Rf_translateCharUTF8(STRING_ELT(arg_names, i)));
    if (kwargs == NULL) kwargs = py.DictNew();
    if (key == NULL || kwargs == NULL || py.DictSetItem(kwargs, key, o) != 0) status = CONV_PYERR;
    py_decref(key);
    py.DecRef(o);
  }
  PyObject *method = NULL, *result = NULL;
  if (status == CONV_OK) {
    method = py.GetAttrString(self, CHAR(STRING_ELT(name, 0)));
    result = method == NULL ? NULL : py.Call(method, tuple, kwargs);
    if (result == NULL) status = CONV_PYERR;
  }
  py_decref(method);
  py_decref(tuple);
  py_decref(kwargs);
  SEXP out;
  if (status == CONV_FALLBACK) {
    out = sentinel_fallback;
  } else if (status == CONV_PYERR) {
    store_error();
    out = sentinel_error;
  } else if (result == py.None) {
    py.DecRef(result);
    out = R_NilValue;
  } else if (r_values) {
    out = R_NilValue;
    int converted = result_to_r(result, R_TENSOR, &out);
    if (converted == CONV_FALLBACK) {
      out = wrap(result, object_class); /* steals */
    } else {
      py.DecRef(result);
      if (converted == CONV_PYERR) {
        store_error();
        out = sentinel_error;
      }
    }
  } else {
    out = wrap_result(result);
  }
  py.GILRelease(gil);
  return out;
}

SEXP tb_call_method(SEXP x, SEXP name, SEXP args) { return call_method(x, name, args, 0); }

/* tb_call_method_r(x, name, args): the same, the result as R values as from_py() gives
 * them (plain scalars, tensors, lists and tuples of them: `$get_last_lr()`), or a wrapper
 * of class "python.builtin.object" for R to convert. */
SEXP tb_call_method_r(SEXP x, SEXP name, SEXP args) { return call_method(x, name, args, 1); }
