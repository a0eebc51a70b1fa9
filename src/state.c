/* State dicts between Python and R in C: an optimizer's or a scheduler's state_dict() as R
 * lists (state_to_r() in R/optim.R), and R state back to Python (state_to_py()).
 *
 * Note: why. R's conversion walks the state with reticulate, a call or two per value: an
 * Adam state_dict() of a 5-layer MLP took 11 ms in R against 5 us in Python. The rules are
 * R's, value by value; where a value is one R converts otherwise (or refuses, with its
 * message), the answer is `.tb_fallback` and R converts the whole state its own way.
 */
#include <stdlib.h>
#include <string.h>

#include "convert.h"

static PyObject *s_detach = NULL, *s_clone = NULL, *s_items = NULL;

static int names_ready(void) {
  if (s_detach == NULL) s_detach = py.UnicodeIntern("detach");
  if (s_clone == NULL) s_clone = py.UnicodeIntern("clone");
  if (s_items == NULL) s_items = py.UnicodeIntern("items");
  return s_detach != NULL && s_clone != NULL && s_items != NULL;
}

static PyObject *call_method0(PyObject *o, PyObject *name) {
  PyObject *m = py.GetAttr(o, name);
  if (m == NULL) return NULL;
  PyObject *args = py.TupleNew(0);
  PyObject *r = args == NULL ? NULL : py.Call(m, args, NULL);
  py_decref(args);
  py.DecRef(m);
  return r;
}

enum { ST_OK = 0, ST_FALLBACK = 1, ST_PYERR = 2 };

/* A copy of tensor `t` (t.detach().clone()) as an R torch_tensor. */
static int tensor_copy(PyObject *t, SEXP *out) {
  PyObject *d = call_method0(t, s_detach);
  PyObject *c = d == NULL ? NULL : call_method0(d, s_clone);
  py_decref(d);
  if (c == NULL) return ST_PYERR;
  if (PY_TYPE(c) != torch_.tensor_type) {
    py.DecRef(c);
    return ST_FALLBACK;
  }
  *out = wrap_result(c);
  return ST_OK;
}

static int to_r(PyObject *o, SEXP *out, int depth);

/* The (key, value) pairs of iterator `it`, `n` of them, as a named R list; names are
 * str(key). */
static int pairs_to_r(PyObject *it, ptrdiff_t n, SEXP *out, int depth) {
  SEXP values = PROTECT(Rf_allocVector(VECSXP, n)), names = PROTECT(Rf_allocVector(STRSXP, n));
  ptrdiff_t k = 0;
  int status = ST_OK;
  PyObject *item;
  while (status == ST_OK && (item = py.IterNext(it)) != NULL) {
    if (k >= n || PY_TYPE(item) != py.TupleType || py.TupleSize(item) != 2) {
      py.DecRef(item);
      status = ST_FALLBACK;
      break;
    }
    PyObject *key = py.Str(py.TupleGetItem(item, 0));
    const char *name = key == NULL ? NULL : py_utf8_plain(key);
    SEXP value = R_NilValue;
    status = key == NULL    ? ST_PYERR
             : name == NULL ? ST_FALLBACK /* not UTF-8 or a NUL inside: R decides */
                            : to_r(py.TupleGetItem(item, 1), &value, depth + 1);
    if (status == ST_OK) {
      SET_VECTOR_ELT(values, k, value);
      SET_STRING_ELT(names, k, Rf_mkCharCE(name, CE_UTF8));
      k++;
    }
    py_decref(key);
    py.DecRef(item);
  }
  if (status == ST_OK && py.ErrOccurred() != NULL) status = ST_PYERR;
  if (status == ST_OK && k != n) status = ST_FALLBACK;
  if (status == ST_OK) {
    if (n > 0) Rf_setAttrib(values, R_NamesSymbol, names);
    *out = values;
  }
  UNPROTECT(2);
  return status;
}

/* state_to_r(): tensors copied, dicts as named lists, lists and tuples as lists, None as
 * NULL, plain scalars and strings as R's. */
static int to_r(PyObject *o, SEXP *out, int depth) {
  PyObject *type = PY_TYPE(o);
  if (depth >= TB_MAX_DEPTH) return ST_FALLBACK;
  if (type == torch_.tensor_type) return tensor_copy(o, out);
  if (type == py.TupleType || type == py.ListType) {
    int list = type == py.ListType;
    ptrdiff_t n = list ? py.ListSize(o) : py.TupleSize(o);
    SEXP v = PROTECT(Rf_allocVector(VECSXP, n));
    for (ptrdiff_t i = 0; i < n; i++) {
      SEXP item = R_NilValue;
      int status = to_r(list ? py.ListGetItem(o, i) : py.TupleGetItem(o, i), &item, depth + 1);
      if (status != ST_OK) {
        UNPROTECT(1);
        return status;
      }
      SET_VECTOR_ELT(v, i, item);
    }
    UNPROTECT(1);
    *out = v;
    return ST_OK;
  }
  if (py.IsSubtype(type, py.DictType)) {
    ptrdiff_t n = py.DictSize(o);
    PyObject *items = n < 0 ? NULL : call_method0(o, s_items);
    PyObject *it = items == NULL ? NULL : py.GetIter(items);
    py_decref(items);
    if (it == NULL) return ST_PYERR;
    int status = pairs_to_r(it, n, out, depth);
    py.DecRef(it);
    return status;
  }
  if (type == py.UnicodeType) {
    const char *s = py_utf8_plain(o);
    if (s == NULL) return ST_FALLBACK; /* not UTF-8 or a NUL inside: R decides */
    *out = Rf_ScalarString(Rf_mkCharCE(s, CE_UTF8));
    return ST_OK;
  }
  if (o == py.None || type == py.BoolType || type == py.FloatType || type == py.LongType)
    return result_to_r(o, R_R, out) == CONV_OK ? ST_OK : ST_FALLBACK;
  return ST_FALLBACK;
}

static SEXP finish(int status, SEXP out) {
  if (status == ST_OK) return out;
  if (status == ST_PYERR) {
    store_error();
    return sentinel_error;
  }
  if (py.ErrOccurred() != NULL) {
    PyObject *a = NULL, *b = NULL, *c = NULL;
    py.ErrFetch(&a, &b, &c);
    py_decref(a);
    py_decref(b);
    py_decref(c);
  }
  return sentinel_fallback;
}

/* tb_state_to_r(obj): the Python state `obj` (a reticulate wrapper) as state_to_r() gives
 * it, `.tb_fallback` where R must convert it, `.tb_error` where Python raised. */
SEXP tb_state_to_r(SEXP obj) {
  PyObject *o = object_of(obj);
  if (!c_path_on() || o == NULL) return sentinel_fallback;
  GILState gil = py.GILEnsure();
  SEXP out = R_NilValue;
  int status = names_ready() ? to_r(o, &out, 0) : ST_PYERR;
  if (status == ST_OK) PROTECT(out);
  out = finish(status, out);
  if (status == ST_OK) UNPROTECT(1);
  py.GILRelease(gil);
  return out;
}

/* ---- R -> Python ----------------------------------------------------------------------- */

static int plain(SEXP v) { return !OBJECT(v) && Rf_getAttrib(v, R_DimSymbol) == R_NilValue; }

/* One element of an atomic vector as reticulate converts it (r_to_py of a length-1 vector). */
static int atom_to_py(SEXP v, R_xlen_t i, PyObject **out) {
  switch (TYPEOF(v)) {
  case INTSXP:
    if (INTEGER(v)[i] == NA_INTEGER) return ST_FALLBACK;
    *out = py.LongFromLongLong(INTEGER(v)[i]);
    break;
  case REALSXP:
    if (ISNAN(REAL(v)[i])) return ST_FALLBACK;
    *out = py.FloatFromDouble(REAL(v)[i]);
    break;
  case LGLSXP:
    if (LOGICAL(v)[i] == NA_LOGICAL) return ST_FALLBACK;
    *out = LOGICAL(v)[i] ? py.True : py.False;
    py.IncRef(*out);
    break;
  case STRSXP:
    if (STRING_ELT(v, i) == NA_STRING) return ST_FALLBACK;
    *out = py.UnicodeFromString(Rf_translateCharUTF8(STRING_ELT(v, i)));
    break;
  default: return ST_FALLBACK;
  }
  return *out == NULL ? ST_PYERR : ST_OK;
}

/* state_to_py(): tensors as they are, NULL as None, a named list as a dict, another list
 * as a list, one R value as a Python scalar, a longer vector as a list of them. A list
 * with the attribute `tb_int_keys` (an optimizer's state, optimizer_state_py() in
 * R/optim.R) is a dict, empty or not, keyed by the whole numbers its names spell. */
static int to_py(SEXP v, PyObject **out, int depth) {
  if (depth >= TB_MAX_DEPTH) return ST_FALLBACK;
  PyObject *t = tensor_of(v);
  if (t != NULL) {
    py.IncRef(t);
    *out = t;
    return ST_OK;
  }
  if (v == R_NilValue) {
    py.IncRef(py.None);
    *out = py.None;
    return ST_OK;
  }
  if (TYPEOF(v) == VECSXP && !OBJECT(v)) {
    R_xlen_t n = Rf_xlength(v);
    SEXP names = Rf_getAttrib(v, R_NamesSymbol);
    int numbered = Rf_getAttrib(v, Rf_install("tb_int_keys")) != R_NilValue;
    if (numbered && n > 0 && names == R_NilValue) return ST_FALLBACK;
    int named = n > 0 && names != R_NilValue;
    for (R_xlen_t i = 0; named && i < n; i++)
      if (CHAR(STRING_ELT(names, i))[0] == '\0') named = 0;
    if (numbered && n > 0 && !named) return ST_FALLBACK;
    named = named || numbered;
    PyObject *c = named ? py.DictNew() : py.ListNew(n);
    if (c == NULL) return ST_PYERR;
    for (R_xlen_t i = 0; i < n; i++) {
      PyObject *item = NULL;
      int status = to_py(VECTOR_ELT(v, i), &item, depth + 1);
      if (status != ST_OK) {
        py.DecRef(c);
        return status;
      }
      if (!named) {
        py.ListSetItem(c, i, item); /* steals */
        continue;
      }
      PyObject *key;
      if (numbered) {
        char *end = NULL;
        const char *text = CHAR(STRING_ELT(names, i));
        long long k = strtoll(text, &end, 10);
        if (end == text || *end != '\0') {
          py.DecRef(item);
          py.DecRef(c);
          return ST_FALLBACK;
        }
        key = py.LongFromLongLong(k);
      } else {
        key = py.UnicodeFromString(Rf_translateCharUTF8(STRING_ELT(names, i)));
      }
      int bad = key == NULL || py.DictSetItem(c, key, item) != 0;
      py_decref(key);
      py.DecRef(item);
      if (bad) {
        py.DecRef(c);
        return ST_PYERR;
      }
    }
    *out = c;
    return ST_OK;
  }
  if (!plain(v) || !Rf_isVectorAtomic(v) || Rf_getAttrib(v, R_NamesSymbol) != R_NilValue)
    return ST_FALLBACK;
  R_xlen_t n = Rf_xlength(v);
  if (n == 1) return atom_to_py(v, 0, out);
  PyObject *list = py.ListNew(n);
  if (list == NULL) return ST_PYERR;
  for (R_xlen_t i = 0; i < n; i++) {
    PyObject *item = NULL;
    int status = atom_to_py(v, i, &item);
    if (status != ST_OK) {
      py.DecRef(list);
      return status;
    }
    py.ListSetItem(list, i, item);
  }
  *out = list;
  return ST_OK;
}

/* tb_state_to_py(x): R state `x` as state_to_py() gives it (a wrapper of class
 * "python.builtin.object"), `.tb_fallback` where R must convert it. */
SEXP tb_state_to_py(SEXP x) {
  if (!c_path_on()) return sentinel_fallback;
  GILState gil = py.GILEnsure();
  PyObject *o = NULL;
  int status = to_py(x, &o, 0);
  SEXP out = status == ST_OK ? wrap(o, object_class) : finish(status, R_NilValue);
  py.GILRelease(gil);
  return out;
}
