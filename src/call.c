/* The one-tensor call of a traced module, and the table of the package's native routines.
 *
 * Note: why the C call paths exist.
 *   reticulate::py_call() converts each argument through R's S3 generic r_to_py() and
 *   computes the class vector of the result from its type's MRO, on every call: about
 *   70-120 us on this project's machine, against 2-3 us for a small torch op and ~12 us
 *   for a traced call (benchmarks/bench_r.R). So the calls R makes all the time go through
 *   C instead: a traced module's call (here), every row of the surface table, operators,
 *   module forwards, `[` and `[<-`, as_array() and the grad mode (surface.c, index.c,
 *   array.c). The Python objects inside reticulate's wrappers are passed straight to the
 *   Python C API, and a tensor result is wrapped the way reticulate wraps it (an
 *   environment holding the object in `pyobj`, `convert`, and the class vector reticulate
 *   gave the first tensor), so every reticulate function takes it. Where C can not do a
 *   call exactly as R does, R does it (see convert.c). pyapi.c says how the C API is found
 *   and how errors reach R.
 */
#include <R_ext/Rdynload.h>

#include "pyapi.h"

SEXP tb_py_init(SEXP torch, SEXP bridge, SEXP example, SEXP libpython, SEXP tb);
SEXP tb_py_stop(void);
SEXP tb_py_resume(void);
SEXP tb_op_compile(SEXP row, SEXP fn, SEXP names, SEXP pynames, SEXP kinds, SEXP positional,
                   SEXP dots, SEXP result, SEXP first);
SEXP tb_op_call(SEXP row, SEXP env);
SEXP tb_op_call_self(SEXP row, SEXP env, SEXP self);
SEXP tb_closure(SEXP formals, SEXP template, SEXP env);
SEXP tb_method_init(SEXP bound);
SEXP tb_method(SEXP x, SEXP name);
SEXP tb_op_calls(void);
SEXP tb_binary(SEXP generic, SEXP e1, SEXP e2);
SEXP tb_call_args(SEXP fn, SEXP args, SEXP during_trace);
SEXP tb_call_forward(SEXP fn, SEXP args, SEXP names, SEXP kinds);
SEXP tb_grad_mode(SEXP enabled);
SEXP tb_call_method(SEXP x, SEXP name, SEXP args);
SEXP tb_call_method_r(SEXP x, SEXP name, SEXP args);
SEXP tb_tensor_field(SEXP x, SEXP name);
SEXP tb_field_remember(SEXP x, SEXP name, SEXP value);
SEXP tb_attr_r(SEXP x, SEXP name);
SEXP tb_remember_class(SEXP wrapper);
SEXP tb_param_groups(SEXP x);
SEXP tb_set_attr(SEXP x, SEXP name, SEXP value);
SEXP tb_named_tensors(SEXP module, SEXP method);
SEXP tb_index(SEXP x, SEXP call, SEXP env, SEXP drop, SEXP value);
SEXP tb_index_dots(SEXP x, SEXP rho, SEXP drop, SEXP value);
SEXP tb_dots_forced(SEXP rho);
SEXP tb_as_array(SEXP x);
SEXP tb_as_array_init(SEXP examples, SEXP layout);
SEXP tb_tensor_from_r(SEXP data, SEXP dtype);
SEXP tb_shift_cache(SEXP clear);
SEXP tb_shift_untracked(SEXP x);
SEXP tb_callback_init(SEXP fns, SEXP tb);
SEXP tb_state_to_r(SEXP obj);
SEXP tb_state_to_py(SEXP x);
SEXP tb_r_function(SEXP fn, SEXP what);
SEXP tb_r_function_calls(void);
SEXP tb_zero_grad(SEXP x);
SEXP tb_adam_step(SEXP x);
SEXP tb_adam_calls(void);

/* Note: .External2 entry points. A surface row's function and `[` read their arguments
 * from their own frame, which .Call() can only be handed as `environment()`: an R
 * closure (base R's), so a call of the frame's function cost a second closure call (an
 * environment, a promise, ~2,500 instructions; five a training step). .External2() hands
 * C the environment it is evaluated in, which is that frame, and nothing else changes.
 * `args` holds the routine first, then the arguments as evaluated. */

/* .External2(tb_op_here, .row): tb_op_call(.row, <the calling frame>). */
static SEXP tb_op_here(SEXP call, SEXP op, SEXP args, SEXP rho) {
  return tb_op_call(CADR(args), rho);
}

/* .External2(tb_op_self_here, .row, self): tb_op_call_self(.row, <the frame>, self). */
static SEXP tb_op_self_here(SEXP call, SEXP op, SEXP args, SEXP rho) {
  return tb_op_call_self(CADR(args), rho, CADDR(args));
}

/* .External2(tb_index_here, x, drop, value): tb_index_dots(x, <the frame>, drop, value). */
static SEXP tb_index_here(SEXP call, SEXP op, SEXP args, SEXP rho) {
  args = CDR(args);
  return tb_index_dots(CAR(args), rho, CADR(args), CADDR(args));
}

/* tb_call_tensor(fn, x): the traced call `fn(x)` for an R torch_tensor `x`, all of it here
 * (R's share of a call is the closure that calls this). Returns an R torch_tensor for a
 * tensor result; reticulate's kind of wrapper with class "python.builtin.object" for
 * another result (R has reticulate wrap that one properly); FALSE when Python raised (the
 * exception is stored for R's handler); NULL when this path does not apply (not started,
 * or `x` is not a torch_tensor), and R calls through reticulate. */
SEXP tb_call_tensor(SEXP fn, SEXP x) {
  PyObject *callable = object_of(fn), *arg = tensor_of(x);
  if (!py_ready || callable == NULL || arg == NULL) return R_NilValue;
  GILState gil = py.GILEnsure();
  PyObject *result = py.CallOneArg(callable, arg);
  SEXP out;
  if (result == NULL) {
    store_error();
    out = Rf_ScalarLogical(0);
  } else {
    out = wrap_result(result);
  }
  py.GILRelease(gil);
  return out;
}

SEXP tb_json_scan(SEXP bytes, SEXP depth_limit); /* jsonscan.c */

static const R_CallMethodDef methods[] = {
    {"tb_py_init", (DL_FUNC) &tb_py_init, 5},
    {"tb_py_stop", (DL_FUNC) &tb_py_stop, 0},
    {"tb_py_resume", (DL_FUNC) &tb_py_resume, 0},
    {"tb_call_tensor", (DL_FUNC) &tb_call_tensor, 2},
    {"tb_op_compile", (DL_FUNC) &tb_op_compile, 9},
    {"tb_op_call", (DL_FUNC) &tb_op_call, 2},
    {"tb_closure", (DL_FUNC) &tb_closure, 3},
    {"tb_method_init", (DL_FUNC) &tb_method_init, 1},
    {"tb_method", (DL_FUNC) &tb_method, 2},
    {"tb_op_calls", (DL_FUNC) &tb_op_calls, 0},
    {"tb_binary", (DL_FUNC) &tb_binary, 3},
    {"tb_call_args", (DL_FUNC) &tb_call_args, 3},
    {"tb_call_forward", (DL_FUNC) &tb_call_forward, 4},
    {"tb_grad_mode", (DL_FUNC) &tb_grad_mode, 1},
    {"tb_call_method", (DL_FUNC) &tb_call_method, 3},
    {"tb_call_method_r", (DL_FUNC) &tb_call_method_r, 3},
    {"tb_tensor_field", (DL_FUNC) &tb_tensor_field, 2},
    {"tb_field_remember", (DL_FUNC) &tb_field_remember, 3},
    {"tb_attr_r", (DL_FUNC) &tb_attr_r, 2},
    {"tb_remember_class", (DL_FUNC) &tb_remember_class, 1},
    {"tb_param_groups", (DL_FUNC) &tb_param_groups, 1},
    {"tb_set_attr", (DL_FUNC) &tb_set_attr, 3},
    {"tb_named_tensors", (DL_FUNC) &tb_named_tensors, 2},
    {"tb_index", (DL_FUNC) &tb_index, 5},
    {"tb_dots_forced", (DL_FUNC) &tb_dots_forced, 1},
    {"tb_as_array", (DL_FUNC) &tb_as_array, 1},
    {"tb_as_array_init", (DL_FUNC) &tb_as_array_init, 2},
    {"tb_tensor_from_r", (DL_FUNC) &tb_tensor_from_r, 2},
    {"tb_shift_cache", (DL_FUNC) &tb_shift_cache, 1},
    {"tb_shift_untracked", (DL_FUNC) &tb_shift_untracked, 1},
    {"tb_callback_init", (DL_FUNC) &tb_callback_init, 2},
    {"tb_state_to_r", (DL_FUNC) &tb_state_to_r, 1},
    {"tb_state_to_py", (DL_FUNC) &tb_state_to_py, 1},
    {"tb_r_function", (DL_FUNC) &tb_r_function, 2},
    {"tb_r_function_calls", (DL_FUNC) &tb_r_function_calls, 0},
    {"tb_zero_grad", (DL_FUNC) &tb_zero_grad, 1},
    {"tb_adam_step", (DL_FUNC) &tb_adam_step, 1},
    {"tb_adam_calls", (DL_FUNC) &tb_adam_calls, 0},
    {"tb_json_scan", (DL_FUNC) &tb_json_scan, 2},
    {NULL, NULL, 0}};

static const R_ExternalMethodDef external_methods[] = {
    {"tb_op_here", (DL_FUNC) &tb_op_here, 1},
    {"tb_op_self_here", (DL_FUNC) &tb_op_self_here, 2},
    {"tb_index_here", (DL_FUNC) &tb_index_here, 3},
    {NULL, NULL, 0}};

void R_init_tracebridge(DllInfo *dll) {
  tb_init_constants();
  R_registerRoutines(dll, NULL, methods, NULL, external_methods);
  R_useDynamicSymbols(dll, FALSE);
}
