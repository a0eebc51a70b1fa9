/* R values to Python arguments, and Python results to R values, in C (see convert.c). */
#ifndef TRACEBRIDGE_CONVERT_H
#define TRACEBRIDGE_CONVERT_H

#include "pyapi.h"

/* Argument kinds of inst/surface.tsv that C converts; R passes their codes (c_kinds in
 * R/surface.R must list them in this order). K_OTHER: C never converts it (R does). */
enum ArgKind {
  K_OTHER = 0, K_TENSOR, K_SCALAR, K_DIM, K_DIMS, K_INDEX1, K_INT, K_INTS, K_DOUBLE,
  K_DOUBLES, K_BOOL, K_STRING, K_DTYPE, K_DEVICE, K_SIZE, K_TENSORS, K_ANY, K_INDEX,
  K_CLASS_INDEX, K_OPTIMIZER, K_LONG, K_PARAMS
};

/* Result kinds C finishes (c_results in R/surface.R, same order); R_OTHER: R does. */
enum ResultKind {
  R_OTHER = 0, R_TENSOR, R_INDEX, R_VALUES_INDICES, R_MAYBE_VALUES_INDICES, R_TENSORS,
  R_R, R_SIZES, R_NONE
};

/* What a conversion did. */
enum { CONV_OK = 0, CONV_FALLBACK = 1, CONV_PYERR = 2 };

int to_py_kind(SEXP v, int kind, int dots, PyObject **out);
/* class_index_arg(): `ignore_index` is the row's value of that argument (or NULL);
 * `shift_ignore`: the call shifts a negative ignore_index with the targets. */
int class_index_to_py(SEXP v, SEXP ignore_index, int shift_ignore, PyObject **out);
/* index_tensor_arg() for a tensor of 1-based indices: shifted by one (a torch op). */
int index_tensor_to_py(PyObject *t, PyObject **out);
/* Empties the cache of shifted index tensors (see the note in convert.c). */
void shift_cache_clear(void);
/* The dtype kind of a tensor: 1 floating point, 2 bool, 0 another, -1 Python error. */
int tensor_dtype_kind(PyObject *t);
int scalar_to_py(SEXP v, PyObject **out);
/* long_arg() for an R vector of whole numbers: an int64 tensor (array.c). */
int long_tensor_to_py(SEXP v, PyObject **out);
int whole_int(SEXP v, long long *out); /* a single whole number, not NA */

/* A result as the R function returns it; CONV_FALLBACK: R must convert it (then `*out` is
 * not set and the caller still owns `result`). Never steals `result`. */
int result_to_r(PyObject *result, int kind, SEXP *out);

#endif
