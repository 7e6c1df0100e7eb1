/* kiln._kiln: the CPython + NumPy binding of the kiln C API (kiln/kiln.h). The ONNX Runtime
 * compatible classes (kiln/__init__.py) are thin Python over this module. Runs and session
 * creation release the GIL; numpy inputs are wrapped without a copy (never cast); outputs are
 * numpy arrays over kiln's memory whose base object frees the kiln tensor. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <string.h>

#include "kiln/kiln.h"

/* ---- exceptions (named as ONNX Runtime's) ----------------------------------------------- */

static PyObject *Err_Base, *Err_Fail, *Err_InvalidArgument, *Err_NoSuchFile, *Err_NoModel,
    *Err_EngineError, *Err_RuntimeException, *Err_InvalidProtobuf, *Err_ModelLoaded,
    *Err_NotImplemented, *Err_InvalidGraph, *Err_EPFail;

static PyObject *raise_code(kiln_code code, const char *msg) {
  PyObject *cls = Err_Fail;
  const char *tag = "FAIL";
  switch (code) {
    case KILN_ERR_INVALID_ARG: cls = Err_InvalidArgument; tag = "INVALID_ARGUMENT"; break;
    case KILN_ERR_IO: cls = Err_NoSuchFile; tag = "NO_SUCHFILE"; break;
    case KILN_ERR_MODEL:
      if (strstr(msg, "protobuf") || strstr(msg, "not an ONNX model") || strstr(msg, "decode")) {
        cls = Err_InvalidProtobuf;
        tag = "INVALID_PROTOBUF";
      } else {
        cls = Err_InvalidGraph;
        tag = "INVALID_GRAPH";
      }
      break;
    case KILN_ERR_RUN: cls = Err_RuntimeException; tag = "RUNTIME_EXCEPTION"; break;
    case KILN_ERR_UNSUPPORTED: cls = Err_NotImplemented; tag = "NOT_IMPLEMENTED"; break;
    default: break;
  }
  PyErr_Format(cls, "[kiln] %s : %s", tag, msg);
  return NULL;
}

static PyObject *raise_err(const kiln_error *e) { return raise_code(e->code, e->message); }

/* ---- dtypes ------------------------------------------------------------------------------- */

/* numpy type number for a kiln dtype; bfloat16 is given as uint16 (its bits), strings as object. */
static int npy_of(kiln_dtype t) {
  switch (t) {
    case KILN_FLOAT: return NPY_FLOAT32;
    case KILN_DOUBLE: return NPY_FLOAT64;
    case KILN_FLOAT16: return NPY_FLOAT16;
    case KILN_BFLOAT16: return NPY_UINT16;
    case KILN_INT8: return NPY_INT8;
    case KILN_UINT8: return NPY_UINT8;
    case KILN_INT16: return NPY_INT16;
    case KILN_UINT16: return NPY_UINT16;
    case KILN_INT32: return NPY_INT32;
    case KILN_UINT32: return NPY_UINT32;
    case KILN_INT64: return NPY_INT64;
    case KILN_UINT64: return NPY_UINT64;
    case KILN_BOOL: return NPY_BOOL;
    case KILN_COMPLEX64: return NPY_COMPLEX64;
    case KILN_COMPLEX128: return NPY_COMPLEX128;
    case KILN_STRING: return NPY_OBJECT;
    /* the 8- and 4-bit types as their one byte per element (codes; int4 as int8 values) */
    case KILN_INT4: return NPY_INT8;
    case KILN_FLOAT8E4M3FN: case KILN_FLOAT8E4M3FNUZ: case KILN_FLOAT8E5M2:
    case KILN_FLOAT8E5M2FNUZ: case KILN_UINT4: case KILN_FLOAT4E2M1: return NPY_UINT8;
    default: return -1;
  }
}

/* kiln dtype of a numpy array's element type (UNDEFINED when kiln has none). */
static kiln_dtype kiln_of(PyArray_Descr *d) {
  int sz = (int)d->elsize;
  switch (d->kind) {
    case 'f': return sz == 4 ? KILN_FLOAT : sz == 8 ? KILN_DOUBLE : sz == 2 ? KILN_FLOAT16 : KILN_UNDEFINED;
    case 'i': return sz == 1 ? KILN_INT8 : sz == 2 ? KILN_INT16 : sz == 4 ? KILN_INT32 : sz == 8 ? KILN_INT64 : KILN_UNDEFINED;
    case 'u': return sz == 1 ? KILN_UINT8 : sz == 2 ? KILN_UINT16 : sz == 4 ? KILN_UINT32 : sz == 8 ? KILN_UINT64 : KILN_UNDEFINED;
    case 'b': return KILN_BOOL;
    case 'c': return sz == 8 ? KILN_COMPLEX64 : sz == 16 ? KILN_COMPLEX128 : KILN_UNDEFINED;
    case 'U': case 'S': case 'O': return KILN_STRING;
    default: return KILN_UNDEFINED;
  }
}

static const char *ort_type(kiln_dtype t) {
  switch (t) {
    case KILN_FLOAT: return "float";
    case KILN_DOUBLE: return "double";
    case KILN_FLOAT16: return "float16";
    case KILN_BFLOAT16: return "bfloat16";
    case KILN_INT8: return "int8";
    case KILN_UINT8: return "uint8";
    case KILN_INT16: return "int16";
    case KILN_UINT16: return "uint16";
    case KILN_INT32: return "int32";
    case KILN_UINT32: return "uint32";
    case KILN_INT64: return "int64";
    case KILN_UINT64: return "uint64";
    case KILN_BOOL: return "bool";
    case KILN_STRING: return "string";
    case KILN_COMPLEX64: return "complex64";
    case KILN_COMPLEX128: return "complex128";
    case KILN_FLOAT8E4M3FN: return "float8e4m3fn";
    case KILN_FLOAT8E4M3FNUZ: return "float8e4m3fnuz";
    case KILN_FLOAT8E5M2: return "float8e5m2";
    case KILN_FLOAT8E5M2FNUZ: return "float8e5m2fnuz";
    case KILN_UINT4: return "uint4";
    case KILN_INT4: return "int4";
    case KILN_FLOAT4E2M1: return "float4e2m1";
    default: return "undefined";
  }
}

/* ---- outputs: kiln values to Python ---------------------------------------------------------- */

static void capsule_free(PyObject *cap) { kiln_tensor_free(PyCapsule_GetPointer(cap, "kiln.tensor")); }

static PyObject *strings_to_array(const kiln_tensor *t) {
  int rank = kiln_tensor_rank(t);
  npy_intp dims[KILN_MAX_RANK];
  for (int d = 0; d < rank; d++) dims[d] = (npy_intp)kiln_tensor_dims(t)[d];
  PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(rank, dims, NPY_OBJECT);
  if (!a) return NULL;
  char *const *s = kiln_tensor_cdata(t);
  PyObject **o = PyArray_DATA(a);
  for (int64_t i = 0; i < kiln_tensor_numel(t); i++) {
    PyObject *u = PyUnicode_DecodeUTF8(s[i], (Py_ssize_t)strlen(s[i]), "surrogateescape");
    if (!u) {
      Py_DECREF(a);
      return NULL;
    }
    Py_XSETREF(o[i], u);
  }
  return (PyObject *)a;
}

/* A copy of a tensor kiln keeps owning (a sequence's item). */
static PyObject *tensor_copy(const kiln_tensor *t) {
  if (kiln_tensor_dtype(t) == KILN_STRING) return strings_to_array(t);
  int rank = kiln_tensor_rank(t), type = npy_of(kiln_tensor_dtype(t));
  if (type < 0) return PyErr_Format(Err_NotImplemented, "element type %s has no numpy type", kiln_dtype_name(kiln_tensor_dtype(t)));
  npy_intp dims[KILN_MAX_RANK];
  for (int d = 0; d < rank; d++) dims[d] = (npy_intp)kiln_tensor_dims(t)[d];
  PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(rank, dims, type);
  if (a && PyArray_NBYTES(a)) memcpy(PyArray_DATA(a), kiln_tensor_cdata(t), (size_t)PyArray_NBYTES(a));
  return (PyObject *)a;
}

/* Python value for a run's output; takes `t` (freed here or by the array's base). */
static PyObject *value_to_py(kiln_tensor *t) {
  PyObject *r = NULL;
  kiln_kind k = kiln_tensor_kind(t);
  if (k == KILN_KIND_NONE) {
    r = Py_NewRef(Py_None);
  } else if (k == KILN_KIND_SEQUENCE) {
    size_t n = kiln_sequence_length(t);
    r = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; r && i < n; i++) {
      PyObject *item = tensor_copy(kiln_sequence_at(t, i));
      if (!item) Py_CLEAR(r);
      else PyList_SET_ITEM(r, (Py_ssize_t)i, item);
    }
  } else if (kiln_tensor_dtype(t) == KILN_STRING) {
    r = strings_to_array(t);
  } else {
    int rank = kiln_tensor_rank(t), type = npy_of(kiln_tensor_dtype(t));
    if (type < 0 || !kiln_tensor_data(t) || kiln_tensor_numel(t) == 0) {
      r = tensor_copy(t); /* empty, or an error for a type numpy lacks */
    } else {
      npy_intp dims[KILN_MAX_RANK];
      for (int d = 0; d < rank; d++) dims[d] = (npy_intp)kiln_tensor_dims(t)[d];
      PyObject *cap = PyCapsule_New(t, "kiln.tensor", capsule_free);
      if (!cap) {
        kiln_tensor_free(t);
        return NULL;
      }
      r = PyArray_SimpleNewFromData(rank, dims, type, kiln_tensor_data(t));
      if (!r || PyArray_SetBaseObject((PyArrayObject *)r, cap) < 0) { /* SetBaseObject steals cap */
        if (!r) Py_DECREF(cap);
        Py_XDECREF(r);
        return NULL;
      }
      return r; /* the capsule frees t */
    }
  }
  kiln_tensor_free(t);
  return r;
}

/* ---- sessions -------------------------------------------------------------------------------- */

typedef struct io_decl {
  const char *name; /* borrowed from the session */
  PyObject *pyname;
  kiln_kind kind, content;
  kiln_dtype dtype;
  int rank;
  int64_t dims[KILN_MAX_RANK]; /* -1: free */
} io_decl;

typedef struct {
  PyObject_HEAD
  kiln_session *s;
  size_t n_in, n_out;
  io_decl *in, *out;
} SessionObject;

typedef struct {
  PyObject_HEAD
  kiln_run_options *ro;
  long long timeout_ms; /* what kiln_run_options_set_timeout_ms was given, for the getter */
} RunOptionsObject;

static PyTypeObject RunOptionsType;

static void session_dealloc(SessionObject *self) {
  for (size_t i = 0; i < self->n_in; i++) Py_XDECREF(self->in[i].pyname);
  for (size_t i = 0; i < self->n_out; i++) Py_XDECREF(self->out[i].pyname);
  PyMem_Free(self->in);
  PyMem_Free(self->out);
  if (self->s) {
    Py_BEGIN_ALLOW_THREADS kiln_session_free(self->s);
    Py_END_ALLOW_THREADS
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* NULL-terminated array of UTF-8 strings borrowed from a list of str (None -> NULL). */
static int str_list(PyObject *seq, const char ***out, const char *what) {
  *out = NULL;
  if (!seq || seq == Py_None) return 0;
  if (!PyList_Check(seq) && !PyTuple_Check(seq)) {
    PyErr_Format(PyExc_TypeError, "%s must be a list of str", what);
    return -1;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  const char **a = PyMem_Calloc((size_t)n + 1, sizeof *a);
  if (!a) return PyErr_NoMemory(), -1;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
    if (!PyUnicode_Check(o) || !(a[i] = PyUnicode_AsUTF8(o))) {
      PyMem_Free(a);
      if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s must be a list of str", what);
      return -1;
    }
  }
  *out = a;
  return 0;
}

static int load_decls(SessionObject *self) {
  kiln_error err;
  self->n_in = kiln_session_input_count(self->s);
  self->n_out = kiln_session_output_count(self->s);
  self->in = PyMem_Calloc(self->n_in + 1, sizeof *self->in);
  self->out = PyMem_Calloc(self->n_out + 1, sizeof *self->out);
  if (!self->in || !self->out) return PyErr_NoMemory(), -1;
  for (int o = 0; o < 2; o++)
    for (size_t i = 0; i < (o ? self->n_out : self->n_in); i++) {
      io_decl *d = o ? &self->out[i] : &self->in[i];
      kiln_io_info info;
      kiln_code rc = o ? kiln_session_output_info(self->s, i, &info, &err) : kiln_session_input_info(self->s, i, &info, &err);
      if (!rc) rc = kiln_session_io_content(self->s, o, i, &d->content, &err);
      if (rc) return raise_err(&err), -1;
      d->name = info.name;
      d->kind = info.kind;
      d->dtype = info.dtype;
      d->rank = info.rank;
      for (int k = 0; k < info.rank && k < KILN_MAX_RANK; k++) d->dims[k] = info.dim_names[k] ? -1 : info.dims[k];
      if (!(d->pyname = PyUnicode_InternFromString(info.name))) return -1;
    }
  return 0;
}

static int session_init(SessionObject *self, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"model", "opt_level", "threads", "inter_op", "profile", "strict_fp32",
                           "lazy_weights", "verify_fusions", "log_level", "verbose", "plugins",
                           "dim_overrides", "disabled_passes", "base_dir", NULL};
  PyObject *model, *plugins = NULL, *dims = NULL;
  kiln_options o;
  kiln_options_init(&o);
  const char *disabled = NULL, *base_dir = NULL;
  if (self->s) {
    PyErr_SetString(PyExc_RuntimeError, "session already created");
    return -1;
  }
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|iiiiiiiiiOOzz", kwlist, &model, &o.opt_level, &o.threads,
                                   &o.inter_op, &o.profile, &o.strict_fp32, &o.lazy_weights,
                                   &o.verify_fusions, &o.log_level, &o.verbose, &plugins, &dims,
                                   &disabled, &base_dir))
    return -1;
  const char **pl = NULL, **dl = NULL;
  if (str_list(plugins, &pl, "plugins") || str_list(dims, &dl, "dim_overrides")) {
    PyMem_Free(pl);
    return -1;
  }
  o.plugins = pl;
  o.dim_overrides = dl;
  o.disabled_passes = disabled;
  kiln_error err = {0};
  kiln_code rc;
  if (PyBytes_Check(model) || PyByteArray_Check(model) || PyMemoryView_Check(model)) {
    Py_buffer view;
    if (PyObject_GetBuffer(model, &view, PyBUF_SIMPLE) < 0) {
      PyMem_Free(pl);
      PyMem_Free(dl);
      return -1;
    }
    Py_BEGIN_ALLOW_THREADS rc = kiln_session_create_from_memory(view.buf, (size_t)view.len, base_dir, &o, &self->s, &err);
    Py_END_ALLOW_THREADS PyBuffer_Release(&view);
  } else {
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(model, &path)) {
      PyMem_Free(pl);
      PyMem_Free(dl);
      return -1;
    }
    const char *p = PyBytes_AS_STRING(path);
    Py_BEGIN_ALLOW_THREADS rc = kiln_session_create(p, &o, &self->s, &err);
    Py_END_ALLOW_THREADS Py_DECREF(path);
  }
  PyMem_Free(pl);
  PyMem_Free(dl);
  if (rc) return raise_err(&err), -1;
  return load_decls(self);
}

/* ---- inputs: Python values to kiln ------------------------------------------------------------ */

typedef struct feed_state {
  const char **names;
  kiln_tensor **vals;
  PyObject **keep; /* arrays whose memory the tensors borrow */
  size_t n;
} feed_state;

static PyObject *type_error(const io_decl *d, kiln_dtype got) {
  return PyErr_Format(Err_InvalidArgument,
                      "[kiln] INVALID_ARGUMENT : Unexpected input data type. Actual: (tensor(%s)) , expected: (tensor(%s)) for input '%s'",
                      ort_type(got), ort_type(d->dtype), d->name);
}

static int check_shape(const io_decl *d, PyArrayObject *a) {
  if (d->rank < 0) return 0;
  if (PyArray_NDIM(a) != d->rank) {
    PyErr_Format(Err_InvalidArgument, "[kiln] INVALID_ARGUMENT : Invalid rank for input: %s Got: %d Expected: %d Please fix either the inputs/outputs or the model.",
                 d->name, PyArray_NDIM(a), d->rank);
    return -1;
  }
  for (int k = 0; k < d->rank; k++)
    if (d->dims[k] >= 0 && PyArray_DIM(a, k) != d->dims[k]) {
      PyErr_Format(Err_InvalidArgument, "[kiln] INVALID_ARGUMENT : Got invalid dimensions for input: %s for the following indices\n index: %d Got: %zd Expected: %lld\n Please fix either the inputs/outputs or the model.",
                   d->name, k, (Py_ssize_t)PyArray_DIM(a, k), (long long)d->dims[k]);
      return -1;
    }
  return 0;
}

static kiln_tensor *string_tensor(PyArrayObject *a) {
  PyArrayObject *o = (PyArrayObject *)PyArray_FromAny((PyObject *)a, PyArray_DescrFromType(NPY_OBJECT), 0, 0,
                                                       NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, NULL);
  if (!o) return NULL;
  int64_t dims[KILN_MAX_RANK];
  int rank = PyArray_NDIM(o);
  if (rank > KILN_MAX_RANK) {
    Py_DECREF(o);
    return PyErr_Format(Err_InvalidArgument, "[kiln] INVALID_ARGUMENT : rank %d is more than kiln's %d", rank, KILN_MAX_RANK), NULL;
  }
  for (int k = 0; k < rank; k++) dims[k] = PyArray_DIM(o, k);
  kiln_tensor *t;
  kiln_error err;
  if (kiln_tensor_create(KILN_STRING, rank, dims, &t, &err)) {
    Py_DECREF(o);
    return raise_err(&err), NULL;
  }
  PyObject **items = PyArray_DATA(o);
  for (npy_intp i = 0; i < PyArray_SIZE(o); i++) {
    PyObject *it = items[i];
    const char *s = NULL;
    if (PyUnicode_Check(it)) s = PyUnicode_AsUTF8(it);
    else if (PyBytes_Check(it)) s = PyBytes_AS_STRING(it);
    else PyErr_Format(Err_InvalidArgument, "[kiln] INVALID_ARGUMENT : a string tensor's element is %s, not str", Py_TYPE(it)->tp_name);
    if (!s || kiln_tensor_set_string(t, i, s, &err)) {
      if (s) raise_err(&err);
      kiln_tensor_free(t);
      Py_DECREF(o);
      return NULL;
    }
  }
  Py_DECREF(o);
  return t;
}

/* One tensor for declared input `d` from value `v`; *keep receives an array the tensor borrows
 * (owned copy when keep is NULL, as sequences need). */
static kiln_tensor *to_tensor(const io_decl *d, PyObject *v, PyObject **keep) {
  PyArrayObject *a;
  kiln_dtype want = d->dtype, got;
  if (PyArray_Check(v)) {
    a = (PyArrayObject *)Py_NewRef(v);
    got = kiln_of(PyArray_DESCR(a));
    if (want == KILN_BFLOAT16 && got == KILN_UINT16) got = KILN_BFLOAT16; /* bfloat16 bits */
    if (want > KILN_BFLOAT16 && got == (kiln_dtype)(want == KILN_INT4 ? KILN_INT8 : KILN_UINT8))
      got = want; /* the 8- and 4-bit types: one byte per element */
    if (got == KILN_UNDEFINED || (want != KILN_UNDEFINED && got != want)) {
      Py_DECREF(a);
      return type_error(d, got), NULL;
    }
  } else {
    got = want != KILN_UNDEFINED ? want : KILN_UNDEFINED;
    PyArray_Descr *descr = got != KILN_UNDEFINED ? PyArray_DescrFromType(npy_of(got)) : NULL;
    a = (PyArrayObject *)PyArray_FromAny(v, descr, 0, 0, NPY_ARRAY_CARRAY, NULL);
    if (!a) return NULL;
    if (got == KILN_UNDEFINED && (got = kiln_of(PyArray_DESCR(a))) == KILN_UNDEFINED) {
      Py_DECREF(a);
      return type_error(d, got), NULL;
    }
  }
  if (check_shape(d, a)) {
    Py_DECREF(a);
    return NULL;
  }
  if (got == KILN_STRING) {
    kiln_tensor *t = string_tensor(a);
    Py_DECREF(a);
    return t;
  }
  if (!PyArray_ISCARRAY_RO(a) || !PyArray_ISNOTSWAPPED(a)) { /* layout or byte order only: never a cast */
    PyArray_Descr *native = PyArray_DescrNewByteorder(PyArray_DESCR(a), NPY_NATIVE);
    PyArrayObject *c = native ? (PyArrayObject *)PyArray_FromArray(a, native, NPY_ARRAY_IN_ARRAY | NPY_ARRAY_ENSURECOPY) : NULL;
    Py_DECREF(a);
    if (!(a = c)) return NULL;
  }
  int rank = PyArray_NDIM(a);
  if (rank > KILN_MAX_RANK) {
    Py_DECREF(a);
    return PyErr_Format(Err_InvalidArgument, "[kiln] INVALID_ARGUMENT : rank %d is more than kiln's %d", rank, KILN_MAX_RANK), NULL;
  }
  int64_t dims[KILN_MAX_RANK];
  for (int k = 0; k < rank; k++) dims[k] = PyArray_DIM(a, k);
  kiln_tensor *t;
  kiln_error err;
  kiln_code rc;
  if (keep) {
    rc = kiln_tensor_create_from_data(got, rank, dims, PyArray_DATA(a), (size_t)PyArray_NBYTES(a), NULL, NULL, &t, &err);
  } else {
    rc = kiln_tensor_create(got, rank, dims, &t, &err);
    if (!rc && PyArray_NBYTES(a)) memcpy(kiln_tensor_data(t), PyArray_DATA(a), (size_t)PyArray_NBYTES(a));
  }
  if (rc) {
    Py_DECREF(a);
    return raise_err(&err), NULL;
  }
  if (keep) *keep = (PyObject *)a;
  else Py_DECREF(a);
  return t;
}

static kiln_tensor *to_value(const io_decl *d, PyObject *v, PyObject **keep) {
  kiln_error err;
  kiln_tensor *t = NULL;
  kiln_kind k = d->kind;
  if (k == KILN_KIND_NONE) {
    if (v == Py_None) return kiln_none_create(d->dtype, &t, &err) ? raise_err(&err), NULL : t;
    k = d->content;
  }
  if (k == KILN_KIND_TENSOR) return to_tensor(d, v, keep);
  if (!PyList_Check(v) && !PyTuple_Check(v))
    return PyErr_Format(Err_InvalidArgument, "[kiln] INVALID_ARGUMENT : input '%s' is a sequence: give a list of arrays, not %s",
                        d->name, Py_TYPE(v)->tp_name), NULL;
  if (kiln_sequence_create(d->dtype, &t, &err)) return raise_err(&err), NULL;
  io_decl item = *d;
  item.rank = -1; /* items' shapes are not declared per item */
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(v); i++) {
    kiln_tensor *it = to_tensor(&item, PySequence_Fast_GET_ITEM(v, i), NULL);
    if (!it || kiln_sequence_append(t, it, &err)) {
      if (it) raise_err(&err);
      kiln_tensor_free(it);
      kiln_tensor_free(t);
      return NULL;
    }
  }
  return t;
}

static void feed_clear(feed_state *f) {
  for (size_t i = 0; i < f->n; i++) {
    kiln_tensor_free(f->vals[i]);
    Py_XDECREF(f->keep[i]);
  }
  PyMem_Free(f->names);
  PyMem_Free(f->vals);
  PyMem_Free(f->keep);
}

static int missing_inputs(SessionObject *self, PyObject *feed) {
  PyObject *miss = PyList_New(0);
  if (!miss) return -1;
  for (size_t i = 0; i < self->n_in; i++)
    if (self->in[i].kind != KILN_KIND_NONE && !PyDict_GetItemWithError(feed, self->in[i].pyname))
      PyList_Append(miss, self->in[i].pyname);
  if (PyList_GET_SIZE(miss)) {
    PyObject *keys = PySequence_List(feed);
    PyErr_Format(PyExc_ValueError, "Required inputs (%R) are missing from input feed (%R).", miss, keys);
    Py_XDECREF(keys);
    Py_DECREF(miss);
    return -1;
  }
  Py_DECREF(miss);
  return 0;
}

static int build_feed(SessionObject *self, PyObject *feed, feed_state *f) {
  memset(f, 0, sizeof *f);
  if (!PyDict_Check(feed)) {
    PyErr_Format(PyExc_TypeError, "input_feed must be a dict of input name -> value, not %s", Py_TYPE(feed)->tp_name);
    return -1;
  }
  size_t n = (size_t)PyDict_GET_SIZE(feed) + self->n_in; /* optionals not given are fed None */
  f->names = PyMem_Calloc(n + 1, sizeof *f->names);
  f->vals = PyMem_Calloc(n + 1, sizeof *f->vals);
  f->keep = PyMem_Calloc(n + 1, sizeof *f->keep);
  if (!f->names || !f->vals || !f->keep) return PyErr_NoMemory(), -1;
  PyObject *key, *val;
  Py_ssize_t pos = 0;
  size_t given = 0;
  while (PyDict_Next(feed, &pos, &key, &val)) {
    size_t i = 0;
    while (i < self->n_in && self->in[i].pyname != key) i++; /* interned: identity first */
    if (i == self->n_in && PyUnicode_Check(key))
      for (i = 0; i < self->n_in && PyUnicode_Compare(self->in[i].pyname, key); i++) {}
    if (i == self->n_in) {
      if (PyErr_Occurred()) return -1;
      PyErr_Format(Err_InvalidArgument, "[kiln] INVALID_ARGUMENT : Invalid input name: %S", key);
      return -1;
    }
    f->names[f->n] = self->in[i].name;
    if (!(f->vals[f->n] = to_value(&self->in[i], val, &f->keep[f->n]))) return -1;
    f->n++;
    given += self->in[i].kind != KILN_KIND_NONE;
  }
  size_t required = 0;
  for (size_t i = 0; i < self->n_in; i++) {
    required += self->in[i].kind != KILN_KIND_NONE;
    if (self->in[i].kind == KILN_KIND_NONE && !PyDict_GetItemWithError(feed, self->in[i].pyname)) {
      kiln_error err;
      if (PyErr_Occurred()) return -1;
      if (kiln_none_create(self->in[i].dtype, &f->vals[f->n], &err)) return raise_err(&err), -1;
      f->names[f->n++] = self->in[i].name;
    }
  }
  return given < required ? missing_inputs(self, feed) : 0;
}

static PyObject *session_run(SessionObject *self, PyObject *args) {
  PyObject *names, *feed, *ro = Py_None;
  if (!PyArg_ParseTuple(args, "OO|O", &names, &feed, &ro)) return NULL;
  if (!self->s) return PyErr_Format(PyExc_RuntimeError, "session not created");
  if (ro != Py_None && !PyObject_TypeCheck(ro, &RunOptionsType))
    return PyErr_Format(PyExc_TypeError, "run_options must be kiln.RunOptions");
  const kiln_run_options *kro = ro == Py_None ? NULL : ((RunOptionsObject *)ro)->ro;
  const char **out_names = NULL;
  size_t n_out = self->n_out;
  PyObject *held = NULL; /* our own tuple of the names: their UTF-8 lives while the GIL is off */
  if (names != Py_None) {
    if (!(held = PySequence_Tuple(names))) return NULL;
    if (PyTuple_GET_SIZE(held) == 0) { /* [] means all outputs, as None */
      Py_CLEAR(held);
    } else if (str_list(held, &out_names, "output_names")) {
      Py_DECREF(held);
      return NULL;
    } else {
      n_out = (size_t)PyTuple_GET_SIZE(held);
    }
  }
  feed_state f;
  kiln_tensor **outs = PyMem_Calloc(n_out + 1, sizeof *outs);
  PyObject *result = NULL;
  if (!outs) {
    PyMem_Free(out_names);
    Py_XDECREF(held);
    return PyErr_NoMemory();
  }
  if (build_feed(self, feed, &f) == 0) {
    kiln_error err;
    kiln_code rc;
    Py_BEGIN_ALLOW_THREADS rc = kiln_session_run_with(self->s, kro, f.n, f.names, (const kiln_tensor *const *)f.vals, n_out,
                                                      out_names, outs, &err);
    Py_END_ALLOW_THREADS
    if (rc) {
      raise_err(&err);
    } else if ((result = PyList_New((Py_ssize_t)n_out))) {
      for (size_t i = 0; i < n_out; i++) {
        PyObject *v = value_to_py(outs[i]);
        outs[i] = NULL;
        if (!v) {
          Py_CLEAR(result);
          for (size_t k = i + 1; k < n_out; k++) kiln_tensor_free(outs[k]), outs[k] = NULL;
          break;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, v);
      }
    }
  }
  feed_clear(&f);
  PyMem_Free(outs);
  PyMem_Free(out_names);
  Py_XDECREF(held);
  return result;
}

/* ---- session facts ------------------------------------------------------------------------- */

static PyObject *decl_list(const io_decl *d, size_t n, kiln_session *s, int output) {
  PyObject *l = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; l && i < n; i++) {
    kiln_io_info info;
    kiln_error err;
    if ((output ? kiln_session_output_info(s, i, &info, &err) : kiln_session_input_info(s, i, &info, &err))) {
      Py_DECREF(l);
      return raise_err(&err);
    }
    PyObject *shape = Py_None;
    if (info.rank >= 0) {
      shape = PyList_New(info.rank);
      for (int k = 0; shape && k < info.rank; k++) {
        PyObject *dim = info.dim_names[k] ? PyUnicode_FromString(info.dim_names[k])
                        : info.dims[k] >= 0 ? PyLong_FromLongLong(info.dims[k]) : Py_NewRef(Py_None);
        if (!dim) Py_CLEAR(shape);
        else PyList_SET_ITEM(shape, k, dim);
      }
      if (!shape) {
        Py_DECREF(l);
        return NULL;
      }
    } else {
      Py_INCREF(shape);
    }
    PyObject *t = Py_BuildValue("(OiiiN)", d[i].pyname, (int)d[i].kind, (int)d[i].dtype, (int)d[i].content, shape);
    if (!t) {
      Py_DECREF(l);
      return NULL;
    }
    PyList_SET_ITEM(l, (Py_ssize_t)i, t);
  }
  return l;
}

static PyObject *session_inputs(SessionObject *self, PyObject *unused) {
  (void)unused;
  return decl_list(self->in, self->n_in, self->s, 0);
}

static PyObject *session_outputs(SessionObject *self, PyObject *unused) {
  (void)unused;
  return decl_list(self->out, self->n_out, self->s, 1);
}

#define NEED_SESSION(self) \
  if (!(self)->s) return PyErr_Format(PyExc_RuntimeError, "the session was not created")

static PyObject *session_metadata(SessionObject *self, PyObject *unused) {
  (void)unused;
  NEED_SESSION(self);
  kiln_model_meta m;
  kiln_error err;
  if (kiln_model_metadata(kiln_session_model(self->s), &m, &err)) return raise_err(&err);
  PyObject *custom = PyDict_New();
  for (size_t i = 0; custom && i < m.n_custom; i++) {
    PyObject *v = PyUnicode_FromString(m.custom_values[i]);
    if (!v || PyDict_SetItemString(custom, m.custom_keys[i], v) < 0) Py_CLEAR(custom);
    Py_XDECREF(v);
  }
  if (!custom) return NULL;
  return Py_BuildValue("{sssssssssssssLsN}", "producer_name", m.producer_name, "producer_version",
                       m.producer_version, "domain", m.domain, "description", m.doc_string, "graph_name",
                       m.graph_name, "graph_description", m.graph_doc_string, "version",
                       (long long)m.model_version, "custom_metadata_map", custom);
}

static PyObject *session_profile(SessionObject *self, PyObject *unused) {
  (void)unused;
  NEED_SESSION(self);
  size_t n = kiln_session_profile_count(self->s);
  PyObject *l = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; l && i < n; i++) {
    kiln_node_profile p;
    if (kiln_session_profile(self->s, i, &p)) {
      Py_DECREF(l);
      return PyErr_Format(Err_Fail, "profile entry %zu is missing", i);
    }
    PyObject *d = Py_BuildValue("{sssssssKsdsdsdss}", "name", p.name, "op_type", p.op_type, "domain", p.domain, "runs",
                                (unsigned long long)p.runs, "total_ms", p.total_ms, "flops", p.flops, "bytes", p.bytes,
                                "shape", p.shape);
    if (!d) Py_CLEAR(l);
    else PyList_SET_ITEM(l, (Py_ssize_t)i, d);
  }
  return l;
}

static PyObject *session_profile_reset(SessionObject *self, PyObject *unused) {
  (void)unused;
  NEED_SESSION(self);
  kiln_session_profile_reset(self->s);
  Py_RETURN_NONE;
}

static PyObject *session_save(SessionObject *self, PyObject *args) {
  PyObject *path;
  NEED_SESSION(self);
  if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &path)) return NULL;
  kiln_error err;
  kiln_code rc = kiln_session_save(self->s, PyBytes_AS_STRING(path), &err);
  Py_DECREF(path);
  if (rc) return raise_err(&err);
  Py_RETURN_NONE;
}

static PyObject *session_info(SessionObject *self, PyObject *unused) {
  (void)unused;
  NEED_SESSION(self);
  size_t arena = 0, inter = 0, packed = 0;
  kiln_session_memory(self->s, &arena, &inter);
  kiln_session_prepacked(self->s, &packed);
  kiln_model_stats st;
  kiln_session_stats(self->s, &st);
  size_t rewrites = 0, n;
  const char *pass;
  for (size_t i = 0; kiln_session_pass_stat(self->s, i, &pass, &n) == KILN_OK; i++) rewrites += n;
  return Py_BuildValue("{sisnsnsnsKsnsnsn}", "rewrites", (Py_ssize_t)rewrites, "threads", kiln_session_threads(self->s), "arena_bytes", (Py_ssize_t)arena,
                       "intermediate_bytes", (Py_ssize_t)inter, "nodes", (Py_ssize_t)st.n_nodes, "param_bytes",
                       (unsigned long long)st.param_bytes, "prepacked_nodes", (Py_ssize_t)packed, "fallbacks",
                       (Py_ssize_t)kiln_session_fallback_count(self->s));
}

static PyMethodDef session_methods[] = {
    {"run", (PyCFunction)session_run, METH_VARARGS, "run(output_names, input_feed, run_options=None) -> list"},
    {"inputs", (PyCFunction)session_inputs, METH_NOARGS, "[(name, kind, dtype, content, shape)]"},
    {"outputs", (PyCFunction)session_outputs, METH_NOARGS, "[(name, kind, dtype, content, shape)]"},
    {"metadata", (PyCFunction)session_metadata, METH_NOARGS, "the ModelProto's metadata as a dict"},
    {"profile", (PyCFunction)session_profile, METH_NOARGS, "per-node profile (profile=1 sessions)"},
    {"profile_reset", (PyCFunction)session_profile_reset, METH_NOARGS, "forget profile times"},
    {"save", (PyCFunction)session_save, METH_VARARGS, "save(path): write the optimised graph"},
    {"info", (PyCFunction)session_info, METH_NOARGS, "threads, memory, node counts"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject SessionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._kiln.Session",
    .tp_basicsize = sizeof(SessionObject),
    .tp_dealloc = (destructor)session_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A kiln session: Session(model_path_or_bytes, opt_level=2, threads=0, ...)",
    .tp_methods = session_methods,
    .tp_init = (initproc)session_init,
    .tp_new = PyType_GenericNew,
};

/* ---- run options ---------------------------------------------------------------------------- */

static int runopts_init(RunOptionsObject *self, PyObject *args, PyObject *kw) {
  if (!PyArg_ParseTuple(args, "") || (kw && PyDict_GET_SIZE(kw))) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "RunOptions() takes no arguments");
    return -1;
  }
  kiln_error err;
  if (!self->ro && kiln_run_options_create(&self->ro, &err)) return raise_err(&err), -1;
  return 0;
}

static void runopts_dealloc(RunOptionsObject *self) {
  kiln_run_options_free(self->ro);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *runopts_get(RunOptionsObject *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(kiln_run_options_terminate(self->ro));
}

static int runopts_set(RunOptionsObject *self, PyObject *v, void *unused) {
  (void)unused;
  int on = v ? PyObject_IsTrue(v) : 0;
  if (on < 0) return -1;
  kiln_run_options_set_terminate(self->ro, on);
  return 0;
}

static PyObject *runopts_timeout_get(RunOptionsObject *self, void *unused) {
  (void)unused;
  return PyLong_FromLongLong(self->timeout_ms);
}

static int runopts_timeout_set(RunOptionsObject *self, PyObject *v, void *unused) {
  (void)unused;
  long long ms = v ? PyLong_AsLongLong(v) : 0;
  if (ms == -1 && PyErr_Occurred()) return -1;
  self->timeout_ms = ms;
  kiln_run_options_set_timeout_ms(self->ro, ms);
  return 0;
}

static PyGetSetDef runopts_getset[] = {
    {"terminate", (getter)runopts_get, (setter)runopts_set, "stop runs using these options (any thread)", NULL},
    {"timeout_ms", (getter)runopts_timeout_get, (setter)runopts_timeout_set,
     "each run's time limit in ms (0: the session's max_run_ms, negative: none); past it the run raises Fail", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject RunOptionsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._kiln.RunOptions",
    .tp_basicsize = sizeof(RunOptionsObject),
    .tp_dealloc = (destructor)runopts_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Run options: a terminate flag checked before each node",
    .tp_getset = runopts_getset,
    .tp_init = (initproc)runopts_init,
    .tp_new = PyType_GenericNew,
};

/* ---- module ---------------------------------------------------------------------------------- */

static PyObject *mod_dtype_name(PyObject *m, PyObject *arg) {
  (void)m;
  long t = PyLong_AsLong(arg);
  if (t == -1 && PyErr_Occurred()) return NULL;
  return PyUnicode_FromString(ort_type((kiln_dtype)t));
}

static PyMethodDef module_methods[] = {
    {"dtype_name", mod_dtype_name, METH_O, "ONNX Runtime's name of a kiln dtype code ('float', ...)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "kiln._kiln", "kiln's C binding", -1,
                                        module_methods, NULL, NULL, NULL, NULL};

static int add_error(PyObject *m, PyObject **slot, const char *name, PyObject *base) {
  char full[64];
  snprintf(full, sizeof full, "kiln.%s", name);
  *slot = PyErr_NewException(full, base, NULL);
  return *slot ? PyModule_AddObjectRef(m, name, *slot) : -1;
}

PyMODINIT_FUNC PyInit__kiln(void);
PyMODINIT_FUNC PyInit__kiln(void) {
  import_array();
  if (PyType_Ready(&SessionType) < 0 || PyType_Ready(&RunOptionsType) < 0) return NULL;
  PyObject *m = PyModule_Create(&module_def);
  if (!m) return NULL;
  if (add_error(m, &Err_Base, "KilnError", PyExc_RuntimeError) || add_error(m, &Err_Fail, "Fail", Err_Base) ||
      add_error(m, &Err_InvalidArgument, "InvalidArgument", Err_Base) ||
      add_error(m, &Err_NoSuchFile, "NoSuchFile", Err_Base) || add_error(m, &Err_NoModel, "NoModel", Err_Base) ||
      add_error(m, &Err_EngineError, "EngineError", Err_Base) ||
      add_error(m, &Err_RuntimeException, "RuntimeException", Err_Base) ||
      add_error(m, &Err_InvalidProtobuf, "InvalidProtobuf", Err_Base) ||
      add_error(m, &Err_ModelLoaded, "ModelLoaded", Err_Base) ||
      add_error(m, &Err_NotImplemented, "NotImplemented", Err_Base) ||
      add_error(m, &Err_InvalidGraph, "InvalidGraph", Err_Base) || add_error(m, &Err_EPFail, "EPFail", Err_Base) ||
      PyModule_AddObjectRef(m, "Session", (PyObject *)&SessionType) < 0 ||
      PyModule_AddObjectRef(m, "RunOptions", (PyObject *)&RunOptionsType) < 0 ||
      PyModule_AddStringConstant(m, "version", KILN_VERSION_STRING) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
