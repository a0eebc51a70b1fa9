/* `opt$step()` of torch.optim.Adam in C: the ops of torch 2.13's _single_tensor_adam, in
 * its order, on its tensors, with its Python floats, without its Python.
 *
 * Note: why, and when. Adam.step() for the six parameters of a small MLP runs ~370,000
 * instructions of Python's interpreter a step (the hooks wrapper, _use_grad, _init_group,
 * adam(), the loop of _single_tensor_adam) around ~54 torch calls: a sixth of a training
 * step, and the largest piece of Python in it (benchmarks/bench_r.R). Here the same torch
 * calls are made through the C API, for each parameter with a gradient, in the order and
 * with the arguments of torch/optim/adam.py (non-capturable branch):
 *   step_t += 1; exp_avg.lerp_(grad, 1 - beta1); exp_avg_sq.mul_(beta2).addcmul_(grad,
 *   grad, value=1 - beta2); step = step_t.item(); bias_correction1 = 1 - beta1**step;
 *   bias_correction2 = 1 - beta2**step; step_size = lr / bias_correction1;
 *   bias_correction2_sqrt = bias_correction2**0.5; denom = (exp_avg_sq.sqrt() /
 *   bias_correction2_sqrt).add_(eps); param.addcdiv_(exp_avg, denom, value=-step_size)
 * with grad mode off (as _use_grad_for_differentiable), Python's float arithmetic being
 * C's on doubles (`**` is pow(), 0.5 included), so the weights are the same to the last
 * bit (tests/testthat/test-training.R). Only where all of this holds, else Python's step
 * runs (the first step, which makes the state, included):
 *   - torch 2.13 (the code read); the object is exactly torch.optim.Adam, its class's
 *     `step` is adam.py's as Optimizer hooks it, and no instance `step` (an LR
 *     scheduler's wrapper) nor optimizer hook (global, but tracebridge's own, or its own) nor
 *     profiler is there,
 *     nor an accelerator; its defaults not differentiable;
 *   - every group: lr, betas (a tuple or list) and eps Python floats (0 < beta < 1),
 *     weight_decay 0; amsgrad, maximize, capturable, differentiable false; fused and
 *     foreach false or None (None chooses the single-tensor loop for CPU tensors);
 *   - every parameter with a gradient: a Tensor or Parameter on the CPU, not complex, its
 *     gradient not sparse, its state holding step, exp_avg and exp_avg_sq tensors.
 * Left out: the profiler's "Optimizer.step#Adam.step" range (record_function), which
 * only a running profiler sees (and then Python's step runs). */
#include <math.h>
#include <string.h>

#include "convert.h"

static struct {
  int tried, ready;
  PyObject *adam_type, *parameter_type, *hooked_step;
  PyObject *pre_hooks, *post_hooks, *profiler_enabled;
  PyObject *s_step, *s_state, *s_dict, *s_pre, *s_post, *s_grad_scale,
      *s_found_inf, *s_is_sparse, *s_is_complex, *s_value;
  PyObject *lerp_, *mul_, *addcmul_, *item, *sqrt, *add_, *addcdiv_, *is_complex;
} A;


/* The names and objects the step needs, once; 0 where torch is not the one read. */
static int adam_init(void) {
  if (A.tried) return A.ready;
  A.tried = 1;
  PyObject *torch = py.GetAttrString(torch_.bridge, "torch");
  if (torch == NULL) {
    py.ErrClear();
    return 0;
  }
  PyObject *version = py_attr_path(torch, "__version__", NULL, NULL);
  const char *v = version == NULL ? NULL : py_utf8_plain(version);
  int known = v != NULL && strncmp(v, "2.13.", 5) == 0;
  py_decref(version);
  /* No accelerator: Optimizer's graph-capture check (CUDA, XPU) has nothing to check. */
  PyObject *available = py_attr_path(torch, "accelerator", "is_available", NULL), *has = NULL;
  if (available != NULL) {
    PyObject *empty = py.TupleNew(0);
    has = empty == NULL ? NULL : py.Call(available, empty, NULL);
    py_decref(empty);
  }
  known = known && has == py.False;
  py_decref(available);
  py_decref(has);
  A.adam_type = py_attr_path(torch, "optim", "Adam", NULL);
  A.parameter_type = py_attr_path(torch, "nn", "Parameter", NULL);
  A.profiler_enabled = py_attr_path(torch, "_C", "_autograd", "_profiler_enabled");
  py.DecRef(torch);
  A.s_step = py.UnicodeIntern("step");
  A.s_state = py.UnicodeIntern("state");
  A.s_dict = py.UnicodeIntern("__dict__");
  A.s_pre = py.UnicodeIntern("_optimizer_step_pre_hooks");
  A.s_post = py.UnicodeIntern("_optimizer_step_post_hooks");
  A.s_grad_scale = py.UnicodeIntern("grad_scale");
  A.s_found_inf = py.UnicodeIntern("found_inf");
  A.s_is_sparse = py.UnicodeIntern("is_sparse");
  A.s_value = py.UnicodeIntern("value");
  A.lerp_ = py_tensor_method("lerp_");
  A.mul_ = py_tensor_method("mul_");
  A.addcmul_ = py_tensor_method("addcmul_");
  A.item = py_tensor_method("item");
  A.sqrt = py_tensor_method("sqrt");
  A.add_ = py_tensor_method("add_");
  A.addcdiv_ = py_tensor_method("addcdiv_");
  A.is_complex = py_tensor_method("is_complex");
  A.ready = known && A.adam_type && A.parameter_type && A.profiler_enabled && A.s_step &&
            A.s_state && A.s_dict && A.s_pre && A.s_post && A.s_grad_scale && A.s_found_inf && A.s_is_sparse &&
            A.s_value && A.lerp_ && A.mul_ && A.addcmul_ && A.item && A.sqrt && A.add_ &&
            A.addcdiv_ && A.is_complex;
  if (py.ErrOccurred() != NULL) py.ErrClear();
  return A.ready;
}

/* Whether `step` (Adam's class attribute now) is Adam.step as Optimizer hooks it
 * (profile_hook_step, done when the first Adam is made) around adam.py's own; the global
 * hooks are then those its module, torch.optim.optimizer, reads. Checked once per object. */
static int hooked_adam_step(PyObject *step) {
  if (step == A.hooked_step) return 1;
  PyObject *hooked = py.GetAttrString(step, "hooked");
  PyObject *inner = py.GetAttrString(step, "__wrapped__");
  PyObject *name = inner == NULL ? NULL : py.GetAttrString(inner, "__qualname__");
  PyObject *module = inner == NULL ? NULL : py.GetAttrString(inner, "__module__");
  PyObject *globals = py.GetAttrString(step, "__globals__");
  const char *n = name == NULL ? NULL : py_utf8_plain(name);
  const char *m = module == NULL ? NULL : py_utf8_plain(module);
  PyObject *pre = NULL, *post = NULL;
  if (globals != NULL && PY_TYPE(globals) == py.DictType) {
    pre = py.DictGetItemString(globals, "_global_optimizer_pre_hooks");   /* borrowed */
    post = py.DictGetItemString(globals, "_global_optimizer_post_hooks"); /* borrowed */
  }
  int ok = hooked == py.True && n != NULL && strcmp(n, "Adam.step") == 0 && m != NULL &&
           strcmp(m, "torch.optim.adam") == 0 && pre != NULL && post != NULL;
  if (ok) {
    py_decref(A.hooked_step);
    py_decref(A.pre_hooks);
    py_decref(A.post_hooks);
    py.IncRef(step);
    py.IncRef(pre);
    py.IncRef(post);
    A.hooked_step = step;
    A.pre_hooks = pre;
    A.post_hooks = post;
  }
  py_decref(hooked);
  py_decref(inner);
  py_decref(name);
  py_decref(module);
  py_decref(globals);
  if (py.ErrOccurred() != NULL) py.ErrClear();
  return ok;
}

/* len(o) == 0 for a dict `o` (hooks); 0 for anything else. */
static int empty_dict(PyObject *o) {
  return o != NULL && py.IsSubtype(PY_TYPE(o), py.DictType) && py.DictSize(o) == 0;
}

/* The global post-hooks are empty but for tracebridge's own (runtime/optimizer_steps.py,
 * marked `_tracebridge_own`), which drops the values a trace keeps from its state after a
 * step: the in-place ops of this step move the weights' versions, which those values are
 * keyed on, so not calling it here loses nothing. */
static int only_own_hooks(PyObject *o) {
  if (o == NULL || !py.IsSubtype(PY_TYPE(o), py.DictType)) return 0;
  ptrdiff_t pos = 0;
  PyObject *key, *value; /* borrowed */
  while (py.DictNext(o, &pos, &key, &value)) {
    PyObject *own = py.GetAttrString(value, "_tracebridge_own");
    int ours = own == py.True;
    py_decref(own);
    if (own == NULL) py.ErrClear();
    if (!ours) return 0;
  }
  return 1;
}

static int is_float(PyObject *o) { return o != NULL && PY_TYPE(o) == py.FloatType; }

/* A group's flag is False or None (or, where `none_ok` is 0, False only). */
static int off(PyObject *group, const char *key, int none_ok) {
  PyObject *v = py.DictGetItemString(group, key); /* borrowed */
  return v == py.False || (none_ok && v == py.None);
}

/* A plain tensor (or Parameter) on the CPU that is not complex. */
static int plain_cpu(PyObject *t) {
  if (t == NULL || (PY_TYPE(t) != torch_.tensor_type && PY_TYPE(t) != A.parameter_type)) return 0;
  PyObject *cpu = py.GetAttr(t, torch_.s_is_cpu);
  PyObject *complex = cpu == py.True ? py.CallOneArg(A.is_complex, t) : NULL;
  int ok = cpu == py.True && complex == py.False;
  py_decref(cpu);
  py_decref(complex);
  return ok;
}

typedef struct {
  PyObject *param, *grad, *exp_avg, *exp_avg_sq, *step; /* new references */
} Slot;

typedef struct {
  double lr, beta1, beta2;
  PyObject *beta2_obj, *eps_obj; /* new references (the group may change while ops run) */
  int first, count;              /* the group's slots */
} Group;

/* Steps done here (tests check that the steps they expect here are). */
static double adam_calls = 0;

SEXP tb_adam_calls(void) { return Rf_ScalarReal(adam_calls); }

#define MAX_SLOTS 256
#define MAX_GROUPS 16

static void groups_release(Group *groups, int n) {
  for (int i = 0; i < n; i++) {
    py_decref(groups[i].beta2_obj);
    py_decref(groups[i].eps_obj);
  }
}

static void slots_release(Slot *slots, int n) {
  for (int i = 0; i < n; i++) {
    py_decref(slots[i].param);
    py_decref(slots[i].grad);
    py_decref(slots[i].exp_avg);
    py_decref(slots[i].exp_avg_sq);
    py_decref(slots[i].step);
  }
}

/* The groups and their parameters with gradients, as _init_group() collects them; 0
 * (nothing held) where the step is not one this file does. */
static int collect(PyObject *self, Slot *slots, int *n_slots, Group *groups, int *n_groups) {
  PyObject *groups_list = py.GetAttr(self, torch_.s_param_groups);
  PyObject *state = py.GetAttr(self, A.s_state);
  int ok = groups_list != NULL && state != NULL && PY_TYPE(groups_list) == py.ListType &&
           py.ListSize(groups_list) <= MAX_GROUPS;
  int n = 0, g = 0, taken = 0; /* taken: the groups whose floats are held */
  for (; ok && g < py.ListSize(groups_list); g++) {
    PyObject *group = py.ListGetItem(groups_list, g); /* borrowed */
    if (PY_TYPE(group) != py.DictType) {
      ok = 0;
      break;
    }
    PyObject *lr = py.DictGetItemString(group, "lr"), *eps = py.DictGetItemString(group, "eps");
    PyObject *betas = py.DictGetItemString(group, "betas");
    PyObject *wd = py.DictGetItemString(group, "weight_decay");
    PyObject *params = py.DictGetItemString(group, "params");
    /* `beta1, beta2 = group["betas"]`: a tuple, or a list (as R's c(0.9, 0.999) comes). */
    PyObject *beta1 = NULL, *beta2 = NULL;
    if (betas != NULL && PY_TYPE(betas) == py.TupleType && py.TupleSize(betas) == 2) {
      beta1 = py.TupleGetItem(betas, 0);
      beta2 = py.TupleGetItem(betas, 1);
    } else if (betas != NULL && PY_TYPE(betas) == py.ListType && py.ListSize(betas) == 2) {
      beta1 = py.ListGetItem(betas, 0);
      beta2 = py.ListGetItem(betas, 1);
    }
    ok = is_float(lr) && is_float(eps) && is_float(beta1) && is_float(beta2) && wd != NULL &&
         ((PY_TYPE(wd) == py.FloatType && py.FloatAsDouble(wd) == 0.0) ||
          (PY_TYPE(wd) == py.LongType && wd != py.True && wd != py.False &&
           py.LongAsLongLongAndOverflow(wd, &(int){0}) == 0)) &&
         params != NULL && PY_TYPE(params) == py.ListType && off(group, "amsgrad", 0) &&
         off(group, "maximize", 0) && off(group, "capturable", 0) &&
         off(group, "differentiable", 0) && off(group, "foreach", 1) && off(group, "fused", 1);
    if (!ok) break;
    Group *G = &groups[g];
    G->lr = py.FloatAsDouble(lr);
    G->beta1 = py.FloatAsDouble(beta1);
    G->beta2 = py.FloatAsDouble(beta2);
    py.IncRef(beta2);
    py.IncRef(eps);
    G->beta2_obj = beta2;
    G->eps_obj = eps;
    G->first = n;
    G->count = 0;
    taken++;
    ok = isfinite(G->lr) && isfinite(py.FloatAsDouble(eps)) && G->beta1 > 0 && G->beta1 < 1 &&
         G->beta2 > 0 && G->beta2 < 1;
    for (ptrdiff_t i = 0; ok && i < py.ListSize(params); i++) {
      PyObject *p = py.ListGetItem(params, i); /* borrowed */
      if (!plain_cpu(p)) {
        ok = 0;
        break;
      }
      PyObject *grad = py.GetAttr(p, torch_.s_grad);
      if (grad == NULL || grad == py.None) {
        ok = grad != NULL;
        py_decref(grad);
        continue;
      }
      PyObject *sparse = py.GetAttr(grad, A.s_is_sparse);
      int usable = sparse == py.False && plain_cpu(grad) && n < MAX_SLOTS;
      py_decref(sparse);
      PyObject *st = usable ? py.GetItem(state, p) : NULL; /* Python's self.state[p] too */
      PyObject *exp_avg = NULL, *exp_avg_sq = NULL, *step = NULL;
      if (st != NULL && PY_TYPE(st) == py.DictType) {
        exp_avg = py.DictGetItemString(st, "exp_avg");
        exp_avg_sq = py.DictGetItemString(st, "exp_avg_sq");
        step = py.DictGetItemString(st, "step");
      }
      usable = usable && plain_cpu(exp_avg) && plain_cpu(exp_avg_sq) && plain_cpu(step);
      if (!usable) {
        py_decref(st);
        py.DecRef(grad);
        ok = 0;
        break;
      }
      py.IncRef(p);
      py.IncRef(exp_avg);
      py.IncRef(exp_avg_sq);
      py.IncRef(step);
      slots[n] = (Slot){p, grad, exp_avg, exp_avg_sq, step};
      n++;
      py.DecRef(st);
    }
    G->count = n - G->first;
  }
  py_decref(groups_list);
  py_decref(state);
  if (py.ErrOccurred() != NULL) py.ErrClear();
  if (!ok) {
    slots_release(slots, n);
    groups_release(groups, taken);
    return 0;
  }
  *n_slots = n;
  *n_groups = g;
  return 1;
}

/* method(self, *args, **{"value": value}); a new reference, NULL on a Python error.
 * `value` is stolen (may be NULL: no keyword). */
static PyObject *call(PyObject *method, PyObject *self, PyObject *a, PyObject *b, PyObject *value) {
  int n = 1 + (a != NULL) + (b != NULL);
  PyObject *args = py.TupleNew(n), *kwargs = NULL, *r = NULL;
  if (args != NULL) {
    PyObject *items[3] = {self, a, b};
    for (int i = 0; i < n; i++) {
      py.IncRef(items[i]);
      py.TupleSetItem(args, i, items[i]);
    }
    if (value != NULL) {
      kwargs = py.DictNew();
      if (kwargs == NULL || py.DictSetItem(kwargs, A.s_value, value) != 0) {
        py_decref(kwargs);
        kwargs = NULL;
        py.DecRef(args);
        args = NULL;
      }
    }
  }
  if (args != NULL) r = py.Call(method, args, kwargs);
  py_decref(args);
  py_decref(kwargs);
  py_decref(value);
  return r;
}

/* call() with the keyword value=v; NULL (Python's error set) where the float cannot be made,
 * rather than the method run without it (with its default value, 1). */
static PyObject *call_valued(PyObject *method, PyObject *self, PyObject *a, PyObject *b,
                             double v) {
  PyObject *value = py.FloatFromDouble(v);
  return value == NULL ? NULL : call(method, self, a, b, value);
}

/* The ops of one parameter (see the note at the top); 0 on a Python error. */
static int step_one(const Slot *s, const Group *G, PyObject *one_minus_beta1) {
  PyObject *r = py.InPlaceAdd(s->step, torch_.one); /* step_t += 1 */
  if (r == NULL) return 0;
  py.DecRef(r);
  r = call(A.lerp_, s->exp_avg, s->grad, one_minus_beta1, NULL);
  if (r == NULL) return 0;
  py.DecRef(r);
  r = call(A.mul_, s->exp_avg_sq, G->beta2_obj, NULL, NULL);
  if (r == NULL) return 0;
  PyObject *r2 = call_valued(A.addcmul_, r, s->grad, s->grad, 1 - G->beta2);
  py.DecRef(r);
  if (r2 == NULL) return 0;
  py.DecRef(r2);
  PyObject *item = py.CallOneArg(A.item, s->step);
  if (item == NULL) return 0;
  double step = py.FloatAsDouble(item);
  int is_float_item = PY_TYPE(item) == py.FloatType;
  py.DecRef(item);
  if (!is_float_item || !isfinite(step) || step < 1) {
    py.ErrSetString(*py.ExcRuntimeError,
                    "tracebridge: Adam's step count is not a number >= 1 after its update.");
    return 0;
  }
  double bias_correction1 = 1 - pow(G->beta1, step);
  double bias_correction2 = 1 - pow(G->beta2, step);
  double step_size = G->lr / bias_correction1;
  double bias_correction2_sqrt = pow(bias_correction2, 0.5);
  PyObject *root = py.CallOneArg(A.sqrt, s->exp_avg_sq);
  if (root == NULL) return 0;
  PyObject *by = py.FloatFromDouble(bias_correction2_sqrt);
  PyObject *denom = by == NULL ? NULL : py.TrueDivide(root, by);
  py_decref(by);
  py.DecRef(root);
  if (denom == NULL) return 0;
  r = call(A.add_, denom, G->eps_obj, NULL, NULL);
  if (r == NULL) {
    py.DecRef(denom);
    return 0;
  }
  py.DecRef(r);
  r = call_valued(A.addcdiv_, s->param, s->exp_avg, denom, -step_size);
  py.DecRef(denom);
  if (r == NULL) return 0;
  py.DecRef(r);
  return 1;
}

/* tb_adam_step(x): `x$step()` of an R optimizer whose `.py` is a torch.optim.Adam, done
 * here (NULL), or `.tb_fallback` (nothing done: Python's step runs), or `.tb_error` (Python
 * raised, as Python's step would have at the same op). */
SEXP tb_adam_step(SEXP x) {
  if (!c_path_on()) return sentinel_fallback;
  PyObject *self = self_of(x);
  if (self == NULL) return sentinel_fallback;
  GILState gil = py.GILEnsure();
  if (!adam_init() || PY_TYPE(self) != A.adam_type) {
    py.GILRelease(gil);
    return sentinel_fallback;
  }
  /* No wrapper (instance `step`, the class's `step` replaced), hook, or profiler. */
  PyObject *dict = py.GetAttr(self, A.s_dict), *pre = NULL, *post = NULL;
  PyObject *cls_step = py.GetAttr(A.adam_type, A.s_step), *profiling = NULL;
  PyObject *empty = py.TupleNew(0);
  if (empty != NULL) profiling = py.Call(A.profiler_enabled, empty, NULL);
  py_decref(empty);
  /* _use_grad_for_differentiable sets grad mode to defaults["differentiable"]. */
  PyObject *defaults = dict != NULL && PY_TYPE(dict) == py.DictType
                           ? py.DictGetItemString(dict, "defaults") : NULL; /* borrowed */
  int plain = defaults != NULL && PY_TYPE(defaults) == py.DictType &&
              off(defaults, "differentiable", 0) &&
              py.DictGetItemString(dict, "step") == NULL &&
              py.DictGetItemString(dict, "grad_scale") == NULL &&
              py.DictGetItemString(dict, "found_inf") == NULL && cls_step != NULL &&
              hooked_adam_step(cls_step) &&
              profiling == py.False && empty_dict(A.pre_hooks) && only_own_hooks(A.post_hooks);
  if (plain) {
    pre = py.GetAttr(self, A.s_pre);
    post = py.GetAttr(self, A.s_post);
    plain = empty_dict(pre) && empty_dict(post);
  }
  py_decref(dict);
  py_decref(pre);
  py_decref(post);
  py_decref(cls_step);
  py_decref(profiling);
  if (py.ErrOccurred() != NULL) py.ErrClear();
  Slot slots[MAX_SLOTS];
  Group groups[MAX_GROUPS];
  int n_slots = 0, n_groups = 0;
  if (!plain || !collect(self, slots, &n_slots, groups, &n_groups)) {
    py.GILRelease(gil);
    return sentinel_fallback;
  }
  /* Grad mode off for the step, and back as it was (as _use_grad_for_differentiable). */
  PyObject *no = py.TupleNew(0), *was = no == NULL ? NULL : py.Call(torch_.is_grad, no, NULL);
  py_decref(no);
  int ok = was != NULL;
  PyObject *r = ok ? py.CallOneArg(torch_.set_grad, py.False) : NULL;
  ok = r != NULL;
  py_decref(r);
  for (int g = 0; ok && g < n_groups; g++) {
    const Group *G = &groups[g];
    PyObject *one_minus_beta1 = py.FloatFromDouble(1 - G->beta1);
    ok = one_minus_beta1 != NULL;
    for (int i = G->first; ok && i < G->first + G->count; i++)
      ok = step_one(&slots[i], G, one_minus_beta1);
    py_decref(one_minus_beta1);
  }
  /* Restored whatever happened, with the error (if any) kept aside meanwhile. */
  PyObject *type = NULL, *value = NULL, *traceback = NULL;
  if (!ok) py.ErrFetch(&type, &value, &traceback);
  if (was != NULL) {
    r = py.CallOneArg(torch_.set_grad, was);
    if (r == NULL) py.ErrClear();
    py_decref(r);
  }
  py_decref(was);
  if (!ok) {
    if (type == NULL) {
      py.ErrSetString(*py.ExcRuntimeError, "tracebridge: Adam's step failed.");
    } else {
      py.ErrRestore(type, value, traceback);
    }
  }
  slots_release(slots, n_slots);
  groups_release(groups, n_groups);
  SEXP out = R_NilValue;
  if (ok) adam_calls++;
  if (!ok) {
    store_error();
    out = sentinel_error;
  }
  py.GILRelease(gil);
  return out;
}
