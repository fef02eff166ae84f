/* ringflow._fastrun - the per-step path of Session.run and
 * Session.make_callable in C (CPython and NumPy C API), everything else of
 * the binding stays in cffi (ringflow._ffi).
 *
 * Why not cffi here: a step of 4 fed and 4 fetched 1 KiB arrays cost about
 * 31 us in Python over the 2.7 us C call (docs/PERFORMANCE.md), and even
 * prepared cffi arrays leave per array ~1 us to wrap a fed array
 * (ffi.from_buffer, rf_tensor_new_external, ffi.gc, an extern "Python"
 * release callback) and ~1 us to wrap a fetched tensor as an array
 * (ffi.buffer, np.frombuffer, a holder). Here a fed array is pinned with a
 * reference count (Py_INCREF, dropped by the tensor's release callback) and
 * a fetched tensor becomes an array with PyArray_NewFromDescr over its
 * memory, whose base object holds the tensor.
 *
 * A Runner is one prepared signature (feeds, fetches, targets), made by
 * ringflow/session.py from cffi arrays it built once; calling it with the
 * feed values runs one step. It holds no lock: several threads may call one
 * Runner at once (the step arrays are on each call's stack). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <string.h>

#include <ringflow/ringflow.h>

/* Steps with more feeds or fetches than this take their arrays from the
 * heap instead of the stack. */
#define STACK_SLOTS 16

/* ---- the holder of a fetched tensor: a NumPy array's base ---- */

typedef struct {
  PyObject_HEAD rf_tensor *tensor;
} TensorRef;

static void tensor_ref_dealloc(TensorRef *self) {
  rf_tensor_release(self->tensor); /* may run a fed array's release */
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *tensor_ref_address(TensorRef *self, void *closure) {
  (void)closure;
  return PyLong_FromVoidPtr(self->tensor);
}

static PyGetSetDef tensor_ref_getset[] = {
    {"address", (getter)tensor_ref_address, NULL,
     "the rf_tensor * whose memory the array is, as an int", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TensorRefType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ringflow._fastrun.TensorRef",
    .tp_basicsize = sizeof(TensorRef),
    .tp_dealloc = (destructor)tensor_ref_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "holds a fetched rf_tensor while arrays over it live",
    .tp_getset = tensor_ref_getset,
};

/* A read-only array over t's memory, taking over the caller's reference
 * (released on failure too). */
static PyObject *wrap_tensor(rf_tensor *t, PyArray_Descr *descr) {
  TensorRef *ref = PyObject_New(TensorRef, &TensorRefType);
  if (!ref) {
    rf_tensor_release(t);
    return NULL;
  }
  ref->tensor = t;
  rf_shape s = rf_tensor_shape(t);
  npy_intp dims[RF_MAX_RANK];
  for (int i = 0; i < s.rank; i++) dims[i] = (npy_intp)s.dims[i];
  Py_INCREF(descr); /* stolen by PyArray_NewFromDescr */
  PyObject *arr = PyArray_NewFromDescr(
      &PyArray_Type, descr, s.rank, dims, NULL, (void *)rf_tensor_data(t),
      NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED, NULL);
  if (!arr) {
    Py_DECREF(ref);
    return NULL;
  }
  if (PyArray_SetBaseObject((PyArrayObject *)arr, (PyObject *)ref) < 0) {
    Py_DECREF(arr); /* the base reference was stolen even on failure */
    return NULL;
  }
  return arr;
}

/* ---- GPU memory through DLPack (legacy "dltensor" capsules, DLPack 0.8) ----
 */

typedef struct {
  int32_t device_type, device_id;
} DLDevice;
typedef struct {
  uint8_t code, bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape, *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };
enum { kDLCUDA = 2 };

/* The DLPack type of each rf_dtype (RF_DTYPE_LIST's order), and back. */
static const DLDataType DL_TYPES[] = {
    [RF_FLOAT16] = {kDLFloat, 16, 1}, [RF_BFLOAT16] = {kDLBfloat, 16, 1},
    [RF_FLOAT32] = {kDLFloat, 32, 1}, [RF_FLOAT64] = {kDLFloat, 64, 1},
    [RF_INT8] = {kDLInt, 8, 1},       [RF_UINT8] = {kDLUInt, 8, 1},
    [RF_INT32] = {kDLInt, 32, 1},     [RF_INT64] = {kDLInt, 64, 1},
    [RF_BOOL] = {kDLBool, 8, 1},
};

static rf_dtype from_dl_type(DLDataType t) {
  for (int c = 0; c < (int)(sizeof DL_TYPES / sizeof *DL_TYPES); c++)
    if (DL_TYPES[c].bits && DL_TYPES[c].code == t.code &&
        DL_TYPES[c].bits == t.bits && t.lanes == 1)
      return (rf_dtype)c;
  return RF_DTYPE_INVALID;
}

/* A tensor in a GPU's memory (rf_tensor_new_external_gpu) as Python sees it:
 * made by from_dlpack, fed to GPU devices, exported again by __dlpack__. */
typedef struct {
  PyObject_HEAD rf_tensor *tensor;
  void *data; /* the device pointer it was made with (the library hands
               * out none) */
  int gpu;
  PyObject *dtype; /* the np.dtype */
} GpuTensor;

static void gpu_tensor_dealloc(GpuTensor *self) {
  rf_tensor_release(self->tensor);
  Py_XDECREF(self->dtype);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *gpu_tensor_shape(GpuTensor *self, void *closure) {
  (void)closure;
  rf_shape s = rf_tensor_shape(self->tensor);
  PyObject *t = PyTuple_New(s.rank);
  for (int i = 0; t && i < s.rank; i++) {
    PyObject *d = PyLong_FromLongLong(s.dims[i]);
    if (!d) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, d);
  }
  return t;
}

static PyObject *gpu_tensor_dtype(GpuTensor *self, void *closure) {
  (void)closure;
  Py_INCREF(self->dtype);
  return self->dtype;
}

static PyObject *gpu_tensor_gpu(GpuTensor *self, void *closure) {
  (void)closure;
  return PyLong_FromLong(self->gpu);
}

static PyObject *gpu_tensor_address(GpuTensor *self, void *closure) {
  (void)closure;
  return PyLong_FromVoidPtr(self->tensor);
}

/* An exported DLManagedTensor with its shape and strides, holding the
 * GpuTensor. */
typedef struct {
  DLManagedTensor m;
  int64_t dims[2 * RF_MAX_RANK];
} Exported;

static void exported_delete(DLManagedTensor *m) {
  PyGILState_STATE g = PyGILState_Ensure();
  Py_DECREF((PyObject *)m->manager_ctx);
  PyGILState_Release(g);
  PyMem_RawFree(m);
}

static void capsule_unused(PyObject *capsule) {
  /* Never consumed (renamed "used_dltensor" when it is): ours to delete. */
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
  if (m && m->deleter) m->deleter(m);
}

static PyObject *gpu_tensor_dlpack(GpuTensor *self, PyObject *args,
                                   PyObject *kw) {
  /* stream, max_version, dl_device, copy: ringflow never writes this
   * memory, so there is nothing for a consumer's stream to wait for, and
   * the legacy capsule is what every consumer takes. */
  (void)args;
  (void)kw;
  Exported *e = PyMem_RawCalloc(1, sizeof *e);
  if (!e) return PyErr_NoMemory();
  rf_shape s = rf_tensor_shape(self->tensor);
  rf_dtype code = rf_tensor_dtype(self->tensor);
  int64_t stride = 1;
  for (int i = s.rank - 1; i >= 0; i--) {
    e->dims[i] = s.dims[i];
    e->dims[RF_MAX_RANK + i] = stride;
    stride *= s.dims[i] > 0 ? s.dims[i] : 1;
  }
  DLTensor *t = &e->m.dl_tensor;
  t->data = self->data;
  t->device = (DLDevice){kDLCUDA, self->gpu};
  t->ndim = s.rank;
  t->dtype = DL_TYPES[code];
  t->shape = e->dims;
  t->strides = e->dims + RF_MAX_RANK;
  Py_INCREF(self);
  e->m.manager_ctx = self;
  e->m.deleter = exported_delete;
  PyObject *capsule = PyCapsule_New(&e->m, "dltensor", capsule_unused);
  if (!capsule) exported_delete(&e->m);
  return capsule;
}

static PyObject *gpu_tensor_dlpack_device(GpuTensor *self, PyObject *unused) {
  (void)unused;
  return Py_BuildValue("(ii)", kDLCUDA, self->gpu);
}

static PyGetSetDef gpu_tensor_getset[] = {
    {"shape", (getter)gpu_tensor_shape, NULL, "the dims, a tuple", NULL},
    {"dtype", (getter)gpu_tensor_dtype, NULL, "the NumPy dtype", NULL},
    {"gpu", (getter)gpu_tensor_gpu, NULL,
     "the physical GPU holding the memory (DLPack's device_id)", NULL},
    {"_address", (getter)gpu_tensor_address, NULL, "the rf_tensor * as an int",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef gpu_tensor_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))gpu_tensor_dlpack,
     METH_VARARGS | METH_KEYWORDS,
     "a DLPack capsule of the device memory (no copy)"},
    {"__dlpack_device__", (PyCFunction)gpu_tensor_dlpack_device, METH_NOARGS,
     "(kDLCUDA, the GPU)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GpuTensorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ringflow.GpuTensor",
    .tp_basicsize = sizeof(GpuTensor),
    .tp_dealloc = (destructor)gpu_tensor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "a tensor in a GPU's memory, from DLPack (ringflow.dlpack)",
    .tp_getset = gpu_tensor_getset,
    .tp_methods = gpu_tensor_methods,
};

/* The release of a tensor over an imported capsule: the producer's deleter,
 * with the GIL (a Python producer's deleter needs it). */
static void delete_imported(void *data, void *arg) {
  (void)data;
  DLManagedTensor *m = arg;
  PyGILState_STATE g = PyGILState_Ensure();
  /* A failed run releases its feeds with its exception set: the deleter
   * may run Python code, which must not see it. */
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (m->deleter) m->deleter(m);
  PyErr_Restore(type, value, tb);
  PyGILState_Release(g);
}

/* gpu_tensor_from_capsule(capsule, dtypes, cls) -> cls instance: the
 * memory of a kDLCUDA "dltensor" capsule as an rf_tensor, without a copy
 * (the capsule is consumed). dtypes: {rf_dtype: np.dtype}. */
static PyObject *gpu_tensor_from_capsule(PyObject *mod, PyObject *args) {
  (void)mod;
  PyObject *capsule, *descrs;
  PyTypeObject *cls;
  if (!PyArg_ParseTuple(args, "OO!O!", &capsule, &PyDict_Type, &descrs,
                        &PyType_Type, &cls))
    return NULL;
  if (!PyType_IsSubtype(cls, &GpuTensorType)) {
    PyErr_SetString(PyExc_TypeError, "cls must be a GpuTensor type");
    return NULL;
  }
  DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
  if (!m) return NULL; /* ValueError: not an unused DLPack capsule */
  DLTensor *t = &m->dl_tensor;
  if (t->device.device_type != kDLCUDA) {
    PyErr_Format(PyExc_BufferError,
                 "DLPack device type %d is not CUDA (%d): host memory goes "
                 "through np.from_dlpack",
                 (int)t->device.device_type, kDLCUDA);
    return NULL;
  }
  rf_dtype code = from_dl_type(t->dtype);
  if (code == RF_DTYPE_INVALID) {
    PyErr_Format(PyExc_TypeError,
                 "DLPack type (code %d, %d bits, %d lanes) has no ringflow "
                 "dtype",
                 t->dtype.code, t->dtype.bits, t->dtype.lanes);
    return NULL;
  }
  if (t->ndim < 0 || t->ndim > RF_MAX_RANK) {
    PyErr_Format(PyExc_ValueError,
                 "a DLPack tensor of rank %d; ringflow's ranks go up to %d",
                 (int)t->ndim, RF_MAX_RANK);
    return NULL;
  }
  rf_shape s = {.rank = t->ndim};
  int64_t n = 1, stride = 1;
  for (int i = 0; i < t->ndim; i++) n *= (s.dims[i] = t->shape[i]);
  for (int i = t->ndim - 1; t->strides && n > 0 && i >= 0; i--) {
    if (t->shape[i] != 1 && t->strides[i] != stride) {
      PyErr_SetString(PyExc_BufferError,
                      "a DLPack tensor that is not C-contiguous: make it "
                      "contiguous on its device first");
      return NULL;
    }
    stride *= t->shape[i];
  }
  char *data = (char *)t->data + t->byte_offset;
  /* An empty tensor may have no memory at all; never read. */
  if (!t->data && n == 0) data = (char *)(uintptr_t)RF_TENSOR_ALIGNMENT;
  PyObject *key = PyLong_FromLong(code);
  if (!key) return NULL;
  PyObject *dtype = PyDict_GetItem(descrs, key); /* borrowed */
  Py_DECREF(key);
  GpuTensor *self = (GpuTensor *)cls->tp_alloc(cls, 0);
  if (!self) return NULL;
  rf_status *st = rf_tensor_new_external_gpu(
      code, &s, t->device.device_id, data, delete_imported, m, &self->tensor);
  if (st) {
    PyErr_SetString(PyExc_ValueError, rf_status_message(st));
    rf_status_free(st);
    Py_DECREF(self);
    return NULL;
  }
  PyCapsule_SetName(capsule, "used_dltensor"); /* the tensor deletes it */
  self->data = data;
  self->gpu = t->device.device_id;
  self->dtype = dtype ? dtype : Py_None;
  Py_INCREF(self->dtype);
  return (PyObject *)self;
}

/* ---- fed arrays ---- */

/* The release of a tensor over a fed array: drops the array's pin, from
 * whichever thread releases the tensor last. */
static void unpin_array(void *data, void *arg) {
  (void)data;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *type, *value, *tb; /* as delete_imported */
  PyErr_Fetch(&type, &value, &tb);
  Py_DECREF((PyObject *)arg);
  PyErr_Restore(type, value, tb);
  PyGILState_Release(g);
}

/* ---- the session's handle ---- */

/* An open session's rf_session * as its runners see it (NULL once closed),
 * and how many of their rf_session_run calls are in progress. Read and
 * written only with the GIL held: Session.close() sets addr to NULL, so no
 * run starts after it, and waits for runs to reach 0 before freeing the
 * session (a run in progress holds no GIL). */
typedef struct {
  PyObject_HEAD void *addr;
  Py_ssize_t runs;
} Handle;

static PyObject *handle_get_addr(Handle *self, void *closure) {
  (void)closure;
  return PyLong_FromVoidPtr(self->addr);
}

static int handle_set_addr(Handle *self, PyObject *v, void *closure) {
  (void)closure;
  if (!v) {
    PyErr_SetString(PyExc_AttributeError, "_addr cannot be deleted");
    return -1;
  }
  void *p = PyLong_AsVoidPtr(v);
  if (!p && PyErr_Occurred()) return -1;
  self->addr = p;
  return 0;
}

static PyObject *handle_get_runs(Handle *self, void *closure) {
  (void)closure;
  return PyLong_FromSsize_t(self->runs);
}

/* take() -> the address, counted as a run in progress until give();
 * RuntimeError when closed. For Session's own calls into the library. */
static PyObject *handle_take(Handle *self, PyObject *unused) {
  (void)unused;
  if (!self->addr) {
    PyErr_SetString(PyExc_RuntimeError, "the session is closed");
    return NULL;
  }
  self->runs++;
  return PyLong_FromVoidPtr(self->addr);
}

static PyObject *handle_give(Handle *self, PyObject *unused) {
  (void)unused;
  if (self->runs > 0) self->runs--;
  Py_RETURN_NONE;
}

static PyGetSetDef handle_getset[] = {
    {"_addr", (getter)handle_get_addr, (setter)handle_set_addr,
     "the rf_session * as an int, 0 once closed", NULL},
    {"_runs", (getter)handle_get_runs, NULL,
     "calls into the session in progress", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef handle_methods[] = {
    {"take", (PyCFunction)handle_take, METH_NOARGS,
     "the rf_session * as an int, counted in progress until give()"},
    {"give", (PyCFunction)handle_give, METH_NOARGS, "ends a take()"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ringflow._fastrun.Handle",
    .tp_basicsize = sizeof(Handle),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "an open session's rf_session * and its calls in progress",
    .tp_getset = handle_getset,
    .tp_methods = handle_methods,
    .tp_new = PyType_GenericNew,
};

/* ---- the prepared signature ---- */

typedef struct {
  PyObject_HEAD Handle *session;
  PyObject *convert;      /* convert(value, dtype) -> ndarray */
  PyObject *raise_status; /* raise_status(address) raises */
  PyObject *keep;         /* what the rf_node pointers live in */
  int num_feeds, num_fetches, num_targets;
  int mode; /* 0: a list of the fetched arrays, 1: the one array, 2: None */
  rf_output *feed_outputs;
  rf_dtype *feed_codes;
  PyArray_Descr **feed_descrs;
  rf_output *fetches;
  PyArray_Descr **fetch_descrs;
  rf_node **targets;
} Runner;

static void runner_dealloc(Runner *self) {
  Py_XDECREF((PyObject *)self->session);
  Py_XDECREF(self->convert);
  Py_XDECREF(self->raise_status);
  Py_XDECREF(self->keep);
  for (int i = 0; self->feed_descrs && i < self->num_feeds; i++)
    Py_XDECREF(self->feed_descrs[i]);
  for (int i = 0; self->fetch_descrs && i < self->num_fetches; i++)
    Py_XDECREF(self->fetch_descrs[i]);
  PyMem_Free(self->feed_outputs);
  PyMem_Free(self->feed_codes);
  PyMem_Free(self->feed_descrs);
  PyMem_Free(self->fetches);
  PyMem_Free(self->fetch_descrs);
  PyMem_Free(self->targets);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Copies n items of `size` bytes from the address `addr` (an int). */
static void *copy_from(PyObject *addr, Py_ssize_t n, size_t size) {
  void *src = PyLong_AsVoidPtr(addr);
  if (PyErr_Occurred()) return NULL;
  void *dst = PyMem_Calloc(n > 0 ? (size_t)n : 1, size);
  if (!dst) return PyErr_NoMemory();
  if (n > 0) memcpy(dst, src, (size_t)n * size);
  return dst;
}

/* Takes the NumPy dtypes of `seq` (a tuple) with new references. */
static PyArray_Descr **take_descrs(PyObject *seq, Py_ssize_t n) {
  PyArray_Descr **d = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof *d);
  if (!d) return (PyArray_Descr **)PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *o = PyTuple_GET_ITEM(seq, i);
    if (!PyArray_DescrCheck(o)) {
      PyErr_SetString(PyExc_TypeError, "Runner: dtypes must be np.dtype");
      for (Py_ssize_t j = 0; j < i; j++) Py_DECREF(d[j]);
      PyMem_Free(d);
      return NULL;
    }
    Py_INCREF(o);
    d[i] = (PyArray_Descr *)o;
  }
  return d;
}

/* Runner(session, feeds_addr, feed_codes, feed_dtypes, fetches_addr,
 *        fetch_dtypes, targets_addr, num_targets, mode, convert,
 *        raise_status, keep)
 * feeds_addr: rf_output[len(feed_codes)]; fetches_addr:
 * rf_output[len(fetch_dtypes)]; targets_addr: rf_node *[num_targets]. */
static int runner_init(Runner *self, PyObject *args, PyObject *kw) {
  PyObject *session, *feeds, *codes, *feed_dtypes, *fetches, *fetch_dtypes;
  PyObject *targets, *convert, *raise_status, *keep;
  int ntargets, mode;
  (void)kw;
  if (!PyArg_ParseTuple(args, "O!OO!O!OO!OiiOOO", &HandleType, &session, &feeds,
                        &PyTuple_Type, &codes, &PyTuple_Type, &feed_dtypes,
                        &fetches, &PyTuple_Type, &fetch_dtypes, &targets,
                        &ntargets, &mode, &convert, &raise_status, &keep))
    return -1;
  Py_ssize_t nf = PyTuple_GET_SIZE(codes), nx = PyTuple_GET_SIZE(fetch_dtypes);
  if (PyTuple_GET_SIZE(feed_dtypes) != nf || ntargets < 0 || nf > INT_MAX ||
      nx > INT_MAX || mode < 0 || mode > 2 || (mode == 1 && nx != 1)) {
    PyErr_SetString(PyExc_ValueError, "Runner: inconsistent arguments");
    return -1;
  }
  self->num_feeds = (int)nf;
  self->num_fetches = (int)nx;
  self->num_targets = ntargets;
  self->mode = mode;
  self->feed_outputs = copy_from(feeds, nf, sizeof(rf_output));
  if (!self->feed_outputs) return -1;
  self->fetches = copy_from(fetches, nx, sizeof(rf_output));
  if (!self->fetches) return -1;
  self->targets = copy_from(targets, ntargets, sizeof(rf_node *));
  if (!self->targets) return -1;
  self->feed_codes = PyMem_Calloc(nf > 0 ? (size_t)nf : 1, sizeof(rf_dtype));
  if (!self->feed_codes) return PyErr_NoMemory(), -1;
  for (Py_ssize_t i = 0; i < nf; i++) {
    long c = PyLong_AsLong(PyTuple_GET_ITEM(codes, i));
    if (c == -1 && PyErr_Occurred()) return -1;
    self->feed_codes[i] = (rf_dtype)c;
  }
  if (!(self->feed_descrs = take_descrs(feed_dtypes, nf))) return -1;
  if (!(self->fetch_descrs = take_descrs(fetch_dtypes, nx))) return -1;
  Py_INCREF(session);
  self->session = (Handle *)session;
  Py_INCREF(convert);
  self->convert = convert;
  Py_INCREF(raise_status);
  self->raise_status = raise_status;
  Py_INCREF(keep);
  self->keep = keep;
  return 0;
}

/* The session's rf_session *, or NULL with RuntimeError when closed. */
static rf_session *live_session(Runner *self) {
  void *p = self->session->addr;
  if (!p) PyErr_SetString(PyExc_RuntimeError, "the session is closed");
  return p;
}

/* value as an array the fed tensor can wrap: itself when it is a
 * C-contiguous aligned ndarray of the dtype, else convert(value, dtype).
 * New reference. */
static PyObject *feed_array(Runner *self, PyObject *value, int i) {
  PyArray_Descr *want = self->feed_descrs[i];
  if (PyArray_CheckExact(value)) {
    PyArrayObject *a = (PyArrayObject *)value;
    PyArray_Descr *d = PyArray_DESCR(a);
    if ((d == want || PyArray_EquivTypes(d, want)) &&
        PyArray_CHKFLAGS(a, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED)) {
      Py_INCREF(value);
      return value;
    }
  }
  PyObject *arr =
      PyObject_CallFunctionObjArgs(self->convert, value, want, NULL);
  if (arr && !PyArray_CheckExact(arr) &&
      !PyObject_TypeCheck(arr, &GpuTensorType)) {
    Py_DECREF(arr);
    PyErr_SetString(PyExc_TypeError, "Runner: convert gave no ndarray");
    return NULL;
  }
  return arr;
}

/* A tensor over the array (which it pins); steals the array reference. */
static int feed_tensor(Runner *self, PyArrayObject *a, int i, rf_tensor **out) {
  int nd = PyArray_NDIM(a);
  if (nd > RF_MAX_RANK) {
    PyErr_Format(PyExc_ValueError,
                 "a fed value has rank %d; ringflow's ranks go up to %d", nd,
                 RF_MAX_RANK);
    Py_DECREF(a);
    return -1;
  }
  rf_shape s;
  s.rank = nd;
  for (int k = 0; k < nd; k++) s.dims[k] = (int64_t)PyArray_DIMS(a)[k];
  rf_status *st = rf_tensor_new_external(self->feed_codes[i], &s,
                                         PyArray_DATA(a), unpin_array, a, out);
  if (st) {
    Py_DECREF(a); /* refused: the release never comes */
    PyObject *r =
        PyObject_CallFunction(self->raise_status, "N", PyLong_FromVoidPtr(st));
    Py_XDECREF(r);
    return -1;
  }
  return 0;
}

static PyObject *runner_call(Runner *self, PyObject *args, PyObject *kw) {
  if (kw && PyDict_GET_SIZE(kw)) {
    PyErr_SetString(PyExc_TypeError, "takes the feed values by position");
    return NULL;
  }
  int nf = self->num_feeds, nx = self->num_fetches;
  if (PyTuple_GET_SIZE(args) != nf) {
    PyErr_Format(PyExc_TypeError, "takes %d feed values (%zd given)", nf,
                 PyTuple_GET_SIZE(args));
    return NULL;
  }
  rf_session *s = live_session(self);
  if (!s) return NULL;
  rf_feed feeds_s[STACK_SLOTS];
  rf_tensor *outs_s[STACK_SLOTS];
  rf_feed *feeds =
      nf <= STACK_SLOTS ? feeds_s : PyMem_Malloc(sizeof *feeds * nf);
  rf_tensor **outs =
      nx <= STACK_SLOTS ? outs_s : PyMem_Malloc(sizeof *outs * nx);
  PyObject *result = NULL;
  int made = 0;
  if (!feeds || !outs) {
    PyErr_NoMemory();
    goto done;
  }
  for (; made < nf; made++) {
    feeds[made].output = self->feed_outputs[made];
    PyObject *v = PyTuple_GET_ITEM(args, made);
    if (PyObject_TypeCheck(v, &GpuTensorType)) {
      feeds[made].value = rf_tensor_retain(((GpuTensor *)v)->tensor);
      continue;
    }
    PyObject *a = feed_array(self, v, made);
    if (a && PyObject_TypeCheck(a, &GpuTensorType)) { /* converted */
      feeds[made].value = rf_tensor_retain(((GpuTensor *)a)->tensor);
      Py_DECREF(a);
      continue;
    }
    if (!a ||
        feed_tensor(self, (PyArrayObject *)a, made, &feeds[made].value) < 0)
      goto done;
  }
  /* Again: converting the feeds ran Python code, which may have let
   * another thread close the session. From here to the run's return no
   * Python code runs in this thread: counted, the session stays. */
  if (!(s = live_session(self))) goto done;
  rf_status *st;
  self->session->runs++;
  Py_BEGIN_ALLOW_THREADS;
  st = rf_session_run(s, feeds, nf, self->fetches, nx, self->targets,
                      self->num_targets, outs);
  Py_END_ALLOW_THREADS;
  self->session->runs--;
  if (st) {
    PyObject *r =
        PyObject_CallFunction(self->raise_status, "N", PyLong_FromVoidPtr(st));
    Py_XDECREF(r);
    goto done;
  }
  if (self->mode == 2) {
    for (int i = 0; i < nx; i++) rf_tensor_release(outs[i]);
    Py_INCREF(Py_None);
    result = Py_None;
  } else if (self->mode == 1) {
    result = wrap_tensor(outs[0], self->fetch_descrs[0]);
  } else {
    result = PyList_New(nx);
    for (int i = 0; i < nx; i++) {
      PyObject *a = result ? wrap_tensor(outs[i], self->fetch_descrs[i])
                           : (rf_tensor_release(outs[i]), NULL);
      if (result && !a) Py_CLEAR(result);
      if (a) PyList_SET_ITEM(result, i, a);
    }
  }
done:
  for (int i = 0; i < made; i++) rf_tensor_release(feeds[i].value);
  if (feeds != feeds_s) PyMem_Free(feeds);
  if (outs != outs_s) PyMem_Free(outs);
  return result;
}

static PyTypeObject RunnerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ringflow._fastrun.Runner",
    .tp_basicsize = sizeof(Runner),
    .tp_dealloc = (destructor)runner_dealloc,
    .tp_call = (ternaryfunc)runner_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "one prepared run signature of a session (session.py)",
    .tp_init = (initproc)runner_init,
    .tp_new = PyType_GenericNew,
};

/* bfloat16_as_uint16(capsule) -> bool: relabels an unused "dltensor"
 * capsule of bfloat16 as uint16 (the same bits), which np.from_dlpack
 * reads (NumPy has no bfloat16: the caller views the array as
 * ml_dtypes.bfloat16). False, the capsule unchanged, for another dtype. */
static PyObject *bfloat16_as_uint16(PyObject *mod, PyObject *capsule) {
  (void)mod;
  DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
  if (!m) return NULL; /* ValueError: not an unused DLPack capsule */
  DLDataType *t = &m->dl_tensor.dtype;
  if (t->code != kDLBfloat || t->bits != 16 || t->lanes != 1) Py_RETURN_FALSE;
  t->code = kDLUInt;
  Py_RETURN_TRUE;
}

static PyMethodDef fastrun_functions[] = {
    {"gpu_tensor_from_capsule", gpu_tensor_from_capsule, METH_VARARGS,
     "gpu_tensor_from_capsule(capsule, dtypes, cls): a kDLCUDA capsule's "
     "memory as a GpuTensor, without a copy"},
    {"bfloat16_as_uint16", bfloat16_as_uint16, METH_O,
     "bfloat16_as_uint16(capsule): relabels a bfloat16 DLPack capsule as "
     "uint16 for np.from_dlpack; whether it did"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastrun_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ringflow._fastrun",
    .m_doc = "the per-step path of Session.run in C, and GPU DLPack",
    .m_size = -1,
    .m_methods = fastrun_functions,
};

PyMODINIT_FUNC PyInit__fastrun(void) {
  import_array();
  if (PyType_Ready(&TensorRefType) < 0 || PyType_Ready(&RunnerType) < 0 ||
      PyType_Ready(&GpuTensorType) < 0 || PyType_Ready(&HandleType) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&fastrun_module);
  if (!m) return NULL;
  Py_INCREF(&RunnerType);
  Py_INCREF(&TensorRefType);
  Py_INCREF(&GpuTensorType);
  Py_INCREF(&HandleType);
  if (PyModule_AddObject(m, "Runner", (PyObject *)&RunnerType) < 0 ||
      PyModule_AddObject(m, "Handle", (PyObject *)&HandleType) < 0 ||
      PyModule_AddObject(m, "TensorRef", (PyObject *)&TensorRefType) < 0 ||
      PyModule_AddObject(m, "GpuTensor", (PyObject *)&GpuTensorType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
