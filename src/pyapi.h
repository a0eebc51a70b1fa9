/* The part of the Python C API this package uses, found at run time in the libpython that
 * reticulate loaded (see pyapi.c), and the helpers every C call path shares.
 *
 * Note: ownership. Every PyObject* a function here returns is a new reference unless its
 * comment says "borrowed"; every path that drops one calls py_decref(). R objects that
 * hold a Python object (wrap()) own one reference, released by the wrapper's finalizer.
 */
#ifndef TRACEBRIDGE_PYAPI_H
#define TRACEBRIDGE_PYAPI_H

#include <R.h>
#include <Rinternals.h>
#include <stddef.h>

typedef struct _object PyObject;
typedef int GILState; /* PyGILState_STATE is an enum */

/* Only the header every Python object starts with (stable across CPython 3.x builds). */
typedef struct {
  ptrdiff_t refcnt;
  PyObject *type;
} ObjectHead;

#define PY_TYPE(o) (((ObjectHead *) (o))->type)

typedef struct {
  PyObject *(*Call)(PyObject *, PyObject *, PyObject *);
  PyObject *(*CallOneArg)(PyObject *, PyObject *);
  GILState (*GILEnsure)(void);
  void (*GILRelease)(GILState);
  void (*DecRef)(PyObject *);
  void (*IncRef)(PyObject *);
  void (*ErrFetch)(PyObject **, PyObject **, PyObject **);
  void (*ErrNormalize)(PyObject **, PyObject **, PyObject **);
  PyObject *(*ErrOccurred)(void);
  int (*ExcSetTraceback)(PyObject *, PyObject *);
  int (*SetAttrString)(PyObject *, const char *, PyObject *);
  PyObject *(*GetAttr)(PyObject *, PyObject *);
  PyObject *(*GetAttrString)(PyObject *, const char *);
  PyObject *(*GetItem)(PyObject *, PyObject *);
  int (*SetItem)(PyObject *, PyObject *, PyObject *);
  PyObject *(*TupleNew)(ptrdiff_t);
  int (*TupleSetItem)(PyObject *, ptrdiff_t, PyObject *);
  ptrdiff_t (*TupleSize)(PyObject *);
  PyObject *(*TupleGetItem)(PyObject *, ptrdiff_t);
  PyObject *(*ListNew)(ptrdiff_t);
  int (*ListSetItem)(PyObject *, ptrdiff_t, PyObject *);
  ptrdiff_t (*ListSize)(PyObject *);
  PyObject *(*ListGetItem)(PyObject *, ptrdiff_t);
  PyObject *(*DictNew)(void);
  int (*DictSetItem)(PyObject *, PyObject *, PyObject *);
  PyObject *(*DictGetItemString)(PyObject *, const char *);
  PyObject *(*LongFromLongLong)(long long);
  long long (*LongAsLongLongAndOverflow)(PyObject *, int *);
  PyObject *(*FloatFromDouble)(double);
  double (*FloatAsDouble)(PyObject *);
  PyObject *(*BoolFromLong)(long);
  PyObject *(*UnicodeFromString)(const char *);
  PyObject *(*UnicodeIntern)(const char *);
  PyObject *(*SliceNew)(PyObject *, PyObject *, PyObject *);
  int (*IsTrue)(PyObject *);
  int (*IsSubtype)(PyObject *, PyObject *);
  PyObject *(*Str)(PyObject *);
  const char *(*UnicodeAsUTF8)(PyObject *);
  const char *(*UnicodeAsUTF8AndSize)(PyObject *, ptrdiff_t *);
  void (*ErrClear)(void);
  int (*DictNext)(PyObject *, ptrdiff_t *, PyObject **, PyObject **);
  PyObject *(*GetIter)(PyObject *);
  PyObject *(*IterNext)(PyObject *);
  /* R functions that Python calls (callback.c) */
  PyObject *(*CFunctionNewEx)(void *, PyObject *, PyObject *);
  PyObject *(*CapsuleNew)(void *, const char *, void (*)(PyObject *));
  void *(*CapsuleGetPointer)(PyObject *, const char *);
  void (*ErrSetString)(PyObject *, const char *);
  ptrdiff_t (*DictSize)(PyObject *);
  void (*ErrRestore)(PyObject *, PyObject *, PyObject *);
  PyObject *(*InPlaceAdd)(PyObject *, PyObject *);
  PyObject *(*TrueDivide)(PyObject *, PyObject *);
  PyObject **ExcRuntimeError, **ExcKeyboardInterrupt; /* the addresses of PyExc_* */
  PyObject *UnicodeType;
  PyObject *None, *True, *False, *Ellipsis;
  PyObject *LongType, *FloatType, *BoolType, *TupleType, *ListType, *DictType;
} PyApi;

extern PyApi py;
extern int py_ready; /* the API was found and tb_py_init() ran */

/* Objects looked up once, at tb_py_init(). */
typedef struct {
  PyObject *tensor_type;   /* torch.Tensor */
  PyObject *size_type;     /* torch.Size */
  PyObject *bridge;        /* tracebridge.frontends.rbridge */
  PyObject *binary_ops;    /* rbridge.BINARY_OPS: R operator name -> Python function */
  PyObject *r_positions;   /* rbridge.r_positions: R's 1-based positions to torch's */
  PyObject *select_positions; /* rbridge.select_positions: index_select, -1 the last */
  PyObject *set_grad;      /* torch._C._set_grad_enabled */
  PyObject *is_grad;       /* torch.is_grad_enabled */
  PyObject *one;           /* the Python int 1 */
  PyObject *one_t;         /* torch.tensor(1): a 0-d int64 tensor, for the 1-based shifts */
  PyObject *where;         /* torch.where */
  PyObject *dtype_bool;    /* torch.bool */
  PyObject *empty;         /* torch.empty */
  PyObject *device;        /* torch.device */
  PyObject *s_add, *s_item, *s_ndim, *s_dtype; /* interned attribute names */
  PyObject *s_sub, *s_is_floating_point, *s_version;
  PyObject *tensor_min;    /* torch.Tensor.min, for the shift of positions (convert.c) */
  PyObject *dtype_int64, *dtype_int32; /* the dtypes rbridge.select_positions() reads as t[..., p] */
  PyObject *slice_all;     /* slice(None): `:` before the dimension read by positions */
  PyObject *optimizer_zero_grad; /* torch.optim.Optimizer.zero_grad (optim.c) */
  PyObject *tensor_zero_, *tensor_detach_, *tensor_requires_grad_; /* Tensor's methods */
  PyObject *s_zero_grad, *s_func, *s_grad, *s_grad_fn, *s_requires_grad, *s_param_groups;
  /* What reading positions from a tensor's memory needs (convert.c, positive_in_memory()) */
  PyObject *s_is_cpu, *s_layout, *strided;
  PyObject *tensor_is_contiguous, *tensor_is_neg, *tensor_numel, *tensor_data_ptr;
} Torch;

extern Torch torch_;

/* R-side constants, preserved for the session. */
extern SEXP tensor_class;   /* reticulate's class vector for a torch.Tensor */
extern SEXP object_class;   /* "python.builtin.object": R re-wraps these (see c_other()) */
extern SEXP sym_pyobj, sym_convert, sym_py_object, sym_dotpy, sym_self;
extern SEXP r_tensor_names, r_tensor_class;
extern SEXP sentinel_fallback, sentinel_error; /* symbols the R callers test with is.symbol() */

PyObject *object_of(SEXP x);            /* borrowed: the object inside a reticulate wrapper */
PyObject *self_of(SEXP x);              /* borrowed: object_of(x), or of its `.py` element */
PyObject *tensor_of(SEXP x);            /* borrowed: the tensor inside an R torch_tensor */
PyObject *py_field_of(SEXP x, const char *cls); /* borrowed: `.py` of a classed R list/env */
SEXP wrap(PyObject *object, SEXP klass); /* steals `object` */
SEXP wrap_result(PyObject *object);      /* steals: an R torch_tensor or a wrapper to re-wrap */
SEXP wrap_tensor(PyObject *object, SEXP klass); /* steals: an R torch_tensor, its wrapper of class `klass` */
void store_error(void);                  /* the pending Python exception, for R's handler */
void py_decref(PyObject *o);             /* Py_DecRef that accepts NULL */
/* The UTF-8 text of str `s` where R holds it as it is; NULL, no Python error left, where
 * it is not UTF-8 or has an embedded NUL (R's conversion then decides: reticulate refuses
 * "Embedded NUL in string" where C would silently cut the string). */
const char *py_utf8_plain(PyObject *s);
/* root.a.b.c (b and c may be NULL: fewer levels); a new reference, NULL on a Python error. */
PyObject *py_attr_path(PyObject *root, const char *a, const char *b, const char *c);
/* An unbound method of torch.Tensor (NULL where Tensor was not found). */
PyObject *py_tensor_method(const char *name);
/* The nesting depth past which the recursive C converters (state.c, callback.c) leave a
 * value to R's conversion, which stops with R's own error instead of C's stack
 * overflowing. R_CheckStack() is no option there: it jumps, and they hold the GIL and
 * Python references. */
#define TB_MAX_DEPTH 1000
void tb_init_constants(void);             /* at load */
int tracing(void);                       /* R is tracing (.tb$tracing) */
int c_path_on(void);                     /* started and not tracing */

#endif
