/* An optimizer's `$zero_grad()` (gradients zeroed in place, as mlverse does) in C.
 *
 * Note: why, and what is left out. torch.optim.Optimizer.zero_grad(set_to_none=False) is
 * Python code: ~12 us a call for the six parameters of a small MLP, against ~3 us for the
 * same work here (a fiftieth of a training step; benchmarks/bench_r.R). Here it does what
 * that method does for each parameter with a gradient: detach_() a gradient that has a
 * grad_fn, else requires_grad_(False) (skipped where the flag is already off, which is
 * the same state), then zero_(); one Tensor.zero_() per gradient is the method's own path
 * without `foreach`, and `foreach` gives the same zeros. Left out: the profiler's
 * "Optimizer.zero_grad#..." range (record_function), which only the profiler sees. Only
 * for an optimizer whose `zero_grad` is torch.optim.Optimizer's own (no subclass or
 * instance overrides it) and whose param_groups are a list of dicts of lists of tensors;
 * anything else answers `.tb_fallback` before any change, and R calls the method.
 */
#include "convert.h"

/* The parameters of one group (borrowed), or NULL where the group is not a dict (exactly:
 * a subclass could read "params" its own way) or they are not a list. */
static PyObject *group_params(PyObject *group) {
  if (PY_TYPE(group) != py.DictType) return NULL;
  PyObject *params = py.DictGetItemString(group, "params");
  return params != NULL && PY_TYPE(params) == py.ListType ? params : NULL;
}

/* Whether `self.zero_grad` is Optimizer.zero_grad, and every group's parameters are
 * tensors; a Python error is cleared (R's call then meets it again). */
static int plain_optimizer(PyObject *self, PyObject *groups) {
  PyObject *method = py.GetAttr(self, torch_.s_zero_grad), *fn = NULL;
  if (method != NULL) fn = py.GetAttr(method, torch_.s_func);
  int plain = fn != NULL && fn == torch_.optimizer_zero_grad;
  py_decref(method);
  py_decref(fn);
  if (py.ErrOccurred() != NULL) py.ErrClear();
  if (!plain || PY_TYPE(groups) != py.ListType) return 0;
  for (ptrdiff_t g = 0; g < py.ListSize(groups); g++) {
    PyObject *params = group_params(py.ListGetItem(groups, g));
    if (params == NULL) return 0;
    for (ptrdiff_t i = 0; i < py.ListSize(params); i++)
      if (!py.IsSubtype(PY_TYPE(py.ListGetItem(params, i)), torch_.tensor_type)) return 0;
  }
  return 1;
}

/* One parameter's gradient zeroed as Optimizer.zero_grad(set_to_none=False) does; 0 on a
 * Python error. */
static int zero_one(PyObject *p) {
  PyObject *grad = py.GetAttr(p, torch_.s_grad);
  if (grad == NULL) return 0;
  if (grad == py.None) {
    py.DecRef(grad);
    return 1;
  }
  PyObject *grad_fn = py.GetAttr(grad, torch_.s_grad_fn), *r = NULL;
  if (grad_fn != NULL && grad_fn != py.None) {
    r = py.CallOneArg(torch_.tensor_detach_, grad);
  } else if (grad_fn != NULL) {
    PyObject *flag = py.GetAttr(grad, torch_.s_requires_grad);
    if (flag == py.False) {
      py.IncRef(py.None);
      r = py.None;
    } else if (flag != NULL) {
      PyObject *args = py.TupleNew(2);
      if (args != NULL) {
        py.IncRef(grad);
        py.TupleSetItem(args, 0, grad);
        py.IncRef(py.False);
        py.TupleSetItem(args, 1, py.False);
        r = py.Call(torch_.tensor_requires_grad_, args, NULL);
        py.DecRef(args);
      }
    }
    py_decref(flag);
  }
  py_decref(grad_fn);
  PyObject *z = r == NULL ? NULL : py.CallOneArg(torch_.tensor_zero_, grad);
  py_decref(r);
  py_decref(z);
  py.DecRef(grad);
  return z != NULL;
}

/* tb_zero_grad(x): `x$zero_grad()` of an R optimizer (its `.py`), gradients zeroed in
 * place; NULL when done, `.tb_fallback` where C does not apply (R calls the method),
 * `.tb_error` when Python raised. */
SEXP tb_zero_grad(SEXP x) {
  if (!c_path_on()) return sentinel_fallback;
  PyObject *self = self_of(x);
  if (self == NULL) return sentinel_fallback;
  GILState gil = py.GILEnsure();
  PyObject *groups = py.GetAttr(self, torch_.s_param_groups);
  if (groups == NULL) py.ErrClear();
  if (groups == NULL || !plain_optimizer(self, groups)) {
    py_decref(groups);
    py.GILRelease(gil);
    return sentinel_fallback;
  }
  /* References held while Python runs (a tensor subclass's code could change a list). */
  int ok = 1;
  for (ptrdiff_t g = 0; ok && g < py.ListSize(groups); g++) {
    PyObject *params = group_params(py.ListGetItem(groups, g));
    if (params == NULL) break;
    py.IncRef(params);
    for (ptrdiff_t i = 0; ok && i < py.ListSize(params); i++) {
      PyObject *p = py.ListGetItem(params, i);
      py.IncRef(p);
      ok = zero_one(p);
      py.DecRef(p);
    }
    py.DecRef(params);
  }
  py.DecRef(groups);
  if (!ok) store_error();
  py.GILRelease(gil);
  return ok ? R_NilValue : sentinel_error;
}
