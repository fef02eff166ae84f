"""Sessions: compile a graph once per (feeds, fetches, targets) and run it.

A Session wraps a C rf_session over a copy of its graph. Several Python
threads may call run() on one session at once: each call is one step, and
the C library runs it with the GIL released.
"""

import collections
import contextlib
import functools
import math
import numbers
import operator
import time
from typing import (Any, Callable, Dict, Iterator, List, Optional, Sequence,
                    Tuple)

import numpy as np

from ringflow import _convert, _fastrun, dtypes, errors
from ringflow._lib import c_name, c_path, check, ffi, lib
from ringflow.framework import Graph, Operation, Tensor, as_graph

__all__ = ["Session", "job_tasks", "lower"]

_NOT_IN_SESSION = (
    " (a session runs a copy of its graph made when the Session was made: "
    "nodes added to the graph after the Session are not in it, so build "
    "everything, global_variables_initializer() included, first)")

# Prepared runs a session keeps for run() (the signatures it was called
# with); past this many it starts again.
_MAX_CALLS = 256

_JOBS = {"auto": lib.RF_JOB_AUTO, "single": lib.RF_JOB_SINGLE,
         "mpi": lib.RF_JOB_MPI}
_EPILOGUES = {"off": lib.RF_MATMUL_EPILOGUES_OFF,
              "gpu": lib.RF_MATMUL_EPILOGUES_GPU,
              "all": lib.RF_MATMUL_EPILOGUES_ALL,
              "auto": lib.RF_MATMUL_EPILOGUES_AUTO}
_CONV_EPILOGUES = {"off": lib.RF_CONV_EPILOGUES_OFF,
                   "gpu": lib.RF_CONV_EPILOGUES_GPU,
                   "all": lib.RF_CONV_EPILOGUES_ALL}
# The longest timeout (seconds): the library's deadlines, now plus twice
# the timeout in nanoseconds, must fit an int64.
_TIMEOUT_MAX_S = 10**9


class Session:
    """A session running `graph` (default: the default graph) on virtual
    devices: cpu:0..cpu_devices-1 and gpu:0..gpu_devices-1.

    cpu_devices, gpu_devices: device counts (1..64 and 0..64); gpu:i runs
      on physical GPU i % (number of GPUs).
    timeout: seconds a collective waits for its participants (default 300)
      before failing with DeadlineExceededError: a number > 0 and at most
      1e9, rounded to whole milliseconds but at least 1 ms.
    threads: worker threads shared by the devices (0: one a core).
    default_device: for nodes with no device and no placed input ("cpu:0").
    job: "auto" (one task of an MPI job when the graph names tasks and the
      process runs under an MPI launcher), "single" or "mpi".
    gpu_sync_on_finish: False lets runs return once their GPU work is
      queued (see sync()); None: the library's default (on).
    The switches (gpu_sync_on_finish, allow_tf32, gpu_graphs,
      group_optimizer_updates) take True, False, 0 or 1 (NumPy's bools and
      ints too); another int raises InvalidArgumentError, another type
      TypeError.
    bucket_bytes: independent all-reduces are fused into buckets of at most
      this many bytes per device, on every device kind (0: none; None or
      -1: the library's default by the devices' kind, 1 MiB on CPU devices
      and 25 MiB on GPU devices; docs/COLLECTIVES.md, "Buckets").
    comm_dtype: the dtype float32 all-reduces travel in: None or "float32"
      (full precision), "bfloat16" or "float16" (a name or a dtype).
    allow_tf32: True lets float32 matrix products and cuDNN's convolutions
      on GPU devices use TF32 tensor cores (rf_session_options.allow_tf32);
      None: the library's default (off). CPU devices ignore it.
    gpu_graphs: True replays a repeated step on GPU devices as one CUDA
      graph (rf_session_options.gpu_graphs; docs/PERFORMANCE.md, "CUDA
      graphs of steps"); None: the library's default (on; the
      environment variable RF_GPU_GRAPHS=0 or 1 sets it). Ignored
      without GPU devices; a step that cannot be captured runs as without.
    matmul_epilogues: "auto" (None: the library's default) fuses
      MatMul -> BiasAdd (-> Relu), and a weight gradient with its bias
      gradient, into one node for float32 products on GPU devices; "gpu"
      does so for float16 and bfloat16 products too, "all" on CPU devices
      too, "off" nowhere (rf_session_options.matmul_epilogues; on a GPU
      one cuBLASLt product with its epilogue, unfused kernels with
      RF_CUBLASLT_EPILOGUES=0 and on CPUs); another value raises ValueError.
    conv_epilogues: "gpu" (None: the library's default) fuses Conv2D ->
      BiasAdd -> Relu into one node (one cuDNN call in float32), and a
      MaxPoolGrad with the ReLU's gradient into one kernel, on GPU
      devices; "all" on CPU devices too (there the unfused kernels one
      after the other), "off" nowhere (rf_session_options.conv_epilogues);
      another value raises ValueError.
    group_optimizer_updates: False runs each Adam, AdamW and momentum
      update as its own kernel instead of one multi-tensor update per
      device and hyper-parameters (rf_session_options.
      group_optimizer_updates); None: the library's default (on).
    dump_graph_dir: a directory (made when missing) where each compile
      writes the graph before and after every phase as JSON and DOT
      (rf_session_options.dump_graph_dir); None: the environment variable
      RF_DUMP_GRAPH_DIR's, if set; "": none.
    Raises InvalidArgumentError when a node requests a device the session
    lacks (naming node, op and device) or an environment switch such as
    RF_FOLD_CONSTANTS has a value the library does not accept (naming the
    variable; docs/ARCHITECTURE.md, "Environment variables"),
    FailedPreconditionError for GPU devices without a usable GPU ("no GPU:
    <reason>").

    Use it as a context manager, or call close(). The graph is copied: ops
    added to it afterwards are not in the session.
    """

    def __init__(self, graph: Optional[Graph] = None, cpu_devices: int = 1,
                 gpu_devices: int = 0, timeout: Optional[float] = None,
                 threads: int = 0, default_device: Optional[str] = None,
                 job: str = "auto",
                 gpu_sync_on_finish: Optional[bool] = True,
                 bucket_bytes: Optional[int] = None,
                 comm_dtype: Optional[str] = None,
                 allow_tf32: Optional[bool] = None,
                 gpu_graphs: Optional[bool] = None,
                 matmul_epilogues: Optional[str] = None,
                 group_optimizer_updates: Optional[bool] = None,
                 dump_graph_dir: Optional[str] = None,
                 conv_epilogues: Optional[str] = None) -> None:
        self._graph = as_graph(graph, "Session")
        opts, keep = _options(cpu_devices, gpu_devices, timeout, threads,
                              default_device, job, gpu_sync_on_finish,
                              bucket_bytes, comm_dtype, allow_tf32,
                              gpu_graphs, matmul_epilogues,
                              group_optimizer_updates, dump_graph_dir,
                              conv_epilogues)
        out = ffi.new("rf_session **")
        with self._graph._lock:
            check(lib.rf_session_new(self._graph._c, opts, out), self._graph)
        del keep
        self._c = out[0]
        # What prepared runs read the rf_session * from (0 once closed):
        # they hold it, not the Session, which they would keep alive.
        self._handle = _fastrun.Handle()
        self._handle._addr = int(ffi.cast("uintptr_t", self._c))
        self._calls: Dict[Any, Callable[..., Any]] = {}

    @property
    def graph(self) -> Graph:
        """The graph the session was made from."""
        return self._graph

    @property
    def task(self) -> Tuple[int, int]:
        """(task, number of tasks) of this session's MPI job; (0, 1) for one
        process."""
        task, n = ffi.new("int *"), ffi.new("int *")
        with self._using() as c:
            lib.rf_session_task(c, task, n)
        return task[0], n[0]

    def run(self, fetches: Any, feed_dict: Optional[Dict[Any, Any]] = None
            ) -> Any:
        """Runs one step and returns the values of `fetches`.

        fetches: a Tensor, Variable (its value) or Operation (run as a
          target; its value is None), or a list, tuple or dict of those,
          nested freely; the result has the same structure with a NumPy
          array per tensor.
        feed_dict: {Tensor: value}, replacing those outputs (placeholders
          or any other) in this step. A value is converted to the tensor's
          dtype as np.asarray does; a C-contiguous array of that dtype is
          not copied, and the library only reads it - do not write it
          while the step runs or while a variable assigned it may hold it.
        The returned arrays share the memory of the step's tensors (no
        copy) and are read-only; np.array(a) gives a writable copy.
        Raises the OpError subclass of the failure, naming the node and
        device (InvalidArgumentError for a fed value of the wrong shape,
        FailedPreconditionError for an uninitialised variable,
        NotFoundError for a node not in the session's graph or a fetch or
        feed key of another graph, DeadlineExceededError for a collective
        missing participants...).
        The session stays usable after an error.
        """
        feeds = feed_dict if feed_dict is not None else {}
        if not isinstance(feeds, dict):
            raise TypeError(f"feed_dict must be a dict, not "
                            f"{type(feeds).__name__}")
        # A prepared run per signature, found by the ids of what it was
        # prepared from (which the entry keeps alive, so that the ids stay
        # theirs): no flattening or conversion of the request per step.
        kind = type(fetches)
        if kind is list or kind is tuple or isinstance(fetches,
                                                        (list, tuple)):
            # By the class and the items (which the entry keeps alive),
            # never by the id of the sequence: a named tuple made for one
            # run is freed, and its id taken by the next one's.
            key = (kind, *map(id, fetches), None, *map(id, feeds))
        else:
            key = (id(fetches), None, *map(id, feeds))
        call = self._calls.get(key)
        if call is None:
            call, cacheable = self._prepare(fetches, list(feeds))
            if cacheable:
                if len(self._calls) >= _MAX_CALLS:
                    self._calls.clear()
                self._calls[key] = call
        return call(*feeds.values())

    def make_callable(self, fetches: Any,
                      feed_list: Optional[Sequence[Any]] = None
                      ) -> Callable[..., Any]:
        """A function running `fetches` with the values of `feed_list`, as
        TensorFlow's Session.make_callable: f(*feed_values) is
        run(fetches, dict(zip(feed_list, feed_values))), with the work that
        depends only on fetches and feed_list (the fetch structure, the
        C-side arrays, the dtypes to convert to) done once here. It is the
        fastest way to run one step many times (bench/python_run_overhead.py
        measures it). Several threads may call it at once. It keeps the
        session alive, and stays valid until the session is closed
        (RuntimeError after close()). feed_list is a list of Tensors: one
        Tensor (not in a list) is a TypeError that says to write [x].
        """
        if isinstance(feed_list, (Tensor, str, bytes)) or (
                feed_list is not None and not hasattr(feed_list, "__iter__")):
            raise TypeError(
                "make_callable: feed_list must be a list of Tensors (write "
                f"[x] for one), not {type(feed_list).__name__}")
        keys = [] if feed_list is None else list(feed_list)
        call, _ = self._prepare(fetches, keys, self)
        return call

    def _prepare(self, fetches: Any, feed_keys: List[Any],
                 owner: Optional["Session"] = None
                 ) -> Tuple[Callable[..., Any], bool]:
        """(a function of the feed values running one step, whether it
        may be cached under the ids of fetches' items and feed_keys: when
        fetches is a leaf, or a list or tuple of leaves). The function
        holds `owner` (make_callable's session; run()'s cache holds none,
        which would be a cycle)."""
        flat: List[Any] = []
        rebuild = _flatten(fetches, flat)
        self._live()
        tensors = [f for f in flat if isinstance(f, Tensor)]
        targets = [f for f in flat if isinstance(f, Operation)]
        for key in feed_keys:
            if not isinstance(key, Tensor):
                raise TypeError(f"feed_dict keys must be Tensors, not "
                                f"{key!r}")
        for item in tensors + targets + feed_keys:
            # The C library finds nodes by name: one of another graph would
            # silently stand for the session's node of that name.
            if item.graph is not self._graph:
                node = item.op if isinstance(item, Tensor) else item
                raise errors.NotFoundError(
                    f"node '{node.name}' is from another graph than the "
                    "session's", errors.NOT_FOUND, node.name)
        for t in tensors:
            if t.dtype is dtypes.resource:
                raise TypeError(f"cannot fetch {t.name}: a resource (a "
                                "variable's handle) has no value to fetch")
        for t in feed_keys:
            if t.dtype is dtypes.resource:
                raise TypeError(f"cannot feed {t.name}: a resource (a "
                                "variable's handle) takes no value; assign "
                                "the variable instead")
        c_feeds = ffi.new("rf_output[]", [k._c for k in feed_keys] or 1)
        c_fetches = ffi.new("rf_output[]", [t._c for t in tensors] or 1)
        c_targets = ffi.new("rf_node *[]", [op._c for op in targets] or 1)
        leaf = _is_leaf(fetches)
        leaves = isinstance(fetches, (list, tuple)) and all(
            _is_leaf(f) for f in fetches)
        if leaf:
            mode = 1 if tensors else 2
        else:
            mode = 0
        runner = _fastrun.Runner(
            self._handle, _address(c_feeds),
            tuple(k._code for k in feed_keys),
            tuple(k.dtype for k in feed_keys), _address(c_fetches),
            tuple(t.dtype for t in tensors), _address(c_targets),
            len(targets), mode, _convert.feed_array,
            functools.partial(_raise_status, graph=self._graph),
            (fetches if leaf else tuple(fetches) if isinstance(
                fetches, (list, tuple)) else None, tuple(flat),
             tuple(feed_keys), owner))
        # A list of tensors comes back as the runner's list itself.
        if leaf or (leaves and type(fetches) is list and
                    len(tensors) == len(flat)):
            return runner, True

        def call(*values: Any) -> Any:
            got = iter(runner(*values))
            return rebuild(lambda f: next(got) if isinstance(f, Tensor)
                           else None)
        return call, leaves

    def sync(self) -> None:
        """Waits for the GPU work of returned steps (gpu_sync_on_finish
        False) and raises the first error found after its step returned."""
        with self._using() as c:
            st = lib.rf_session_sync(c)
        check(st, self._graph)

    def trace_next_run(self, path: str) -> None:
        """Makes the next run write a Chrome trace of its kernels to `path`
        (a str or path; open it in Perfetto); a failure to write is that
        run's error. An empty path, or one holding a NUL byte, is an
        InvalidArgumentError."""
        p = c_path(path)
        with self._using() as c:
            st = lib.rf_session_trace_next_run(c, p)
        check(st)

    def close(self) -> None:
        """Frees the session; idempotent. Runs in progress in other
        threads (run, make_callable's functions, sync) are waited for
        first; any call after close() raises RuntimeError."""
        c, self._c = getattr(self, "_c", None), None
        if c is not None:
            h = self._handle
            h._addr = 0  # no call starts from here on
            self._calls = {}
            while h._runs:  # calls in progress hold no GIL: wait them out
                time.sleep(0.0005)
            lib.rf_session_free(c)

    def _live(self):
        if self._c is None:
            raise RuntimeError("the session is closed")
        return self._c

    @contextlib.contextmanager
    def _using(self) -> Iterator[Any]:
        """The rf_session *, which close() waits for until the block ends
        (cffi calls hold no GIL: another thread may close meanwhile)."""
        addr = self._handle.take()  # RuntimeError when closed
        try:
            yield ffi.cast("rf_session *", addr)
        finally:
            self._handle.give()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def _address(cdata) -> int:
    return int(ffi.cast("uintptr_t", cdata))


def _raise_status(address: int, graph: Optional[Graph] = None) -> None:
    """Raises the exception of the rf_status * at `address` (freeing it);
    what a prepared run calls when the C library refuses its step (graph:
    the session's, where a node whose name the message cuts is found)."""
    e = errors._from_status(ffi.cast("rf_status *", address), graph)
    if (isinstance(e, errors.NotFoundError) and
            "is not in the session's graph" in e.message):
        e.message += _NOT_IN_SESSION
        e.args = (e.message,)
    raise e


def _options(cpu_devices: int = 1, gpu_devices: int = 0,
             timeout: Optional[float] = None, threads: int = 0,
             default_device: Optional[str] = None, job: str = "auto",
             gpu_sync_on_finish: Optional[bool] = True,
             bucket_bytes: Optional[int] = None,
             comm_dtype: Optional[str] = None,
             allow_tf32: Optional[bool] = None,
             gpu_graphs: Optional[bool] = None,
             matmul_epilogues: Optional[str] = None,
             group_optimizer_updates: Optional[bool] = None,
             dump_graph_dir: Optional[str] = None,
             conv_epilogues: Optional[str] = None):
    """rf_session_options (and what its pointers point to, to keep alive
    while they are used)."""
    opts = ffi.new("rf_session_options *")
    lib.rf_session_options_init(opts)
    opts.num_cpu_devices = _c_int("num_cpu_devices", cpu_devices, 32)
    opts.num_gpu_devices = _c_int("num_gpu_devices", gpu_devices, 32)
    opts.num_threads = _c_int("num_threads", threads, 32)
    if timeout is not None:
        opts.collective_timeout_ms = _timeout_ms(timeout)
    # char arrays that cffi owns: a struct's char * field takes a cdata
    # pointer, not bytes; the caller keeps them alive while opts is used.
    dev = ffi.new("char[]", c_name(default_device)) \
        if default_device is not None else ffi.NULL
    opts.default_device = dev
    if job not in _JOBS:
        raise ValueError(f"job must be one of {', '.join(_JOBS)}")
    opts.job = _JOBS[job]
    if gpu_sync_on_finish is not None:
        # 0 or 1, as the library checks it too (rf_session_new).
        on = _switch("gpu_sync_on_finish", gpu_sync_on_finish)
        if on not in (0, 1):
            raise errors.InvalidArgumentError(
                f"session options: gpu_sync_on_finish must be 0 or 1, "
                f"got {on}")
        opts.gpu_sync_on_finish = on
    if bucket_bytes is not None:
        opts.collective_bucket_bytes = _c_int("collective_bucket_bytes",
                                              bucket_bytes, 64)
    if comm_dtype is not None and not isinstance(comm_dtype, str):
        # A dtype, as everywhere a dtype is asked for; the library checks
        # its name (and refuses the dtypes that cannot be a wire dtype).
        comm_dtype = dtypes.as_dtype(comm_dtype).name
    wire = ffi.new("char[]", c_name(comm_dtype)) \
        if comm_dtype is not None else ffi.NULL
    opts.collective_comm_dtype = wire
    dump = ffi.new("char[]", c_path(dump_graph_dir)) \
        if dump_graph_dir is not None else ffi.NULL
    opts.dump_graph_dir = dump
    # Switches: the value as an int, checked by the library (0 or 1), so
    # that True/False and 0/1 work and anything else fails as in C.
    if allow_tf32 is not None:
        opts.allow_tf32 = _switch("allow_tf32", allow_tf32)
    if gpu_graphs is not None:
        opts.gpu_graphs = _switch("gpu_graphs", gpu_graphs)
    if group_optimizer_updates is not None:
        opts.group_optimizer_updates = _switch("group_optimizer_updates",
                                               group_optimizer_updates)
    if matmul_epilogues is not None:
        opts.matmul_epilogues = _choice("matmul_epilogues", matmul_epilogues,
                                        _EPILOGUES)
    if conv_epilogues is not None:
        opts.conv_epilogues = _choice("conv_epilogues", conv_epilogues,
                                      _CONV_EPILOGUES)
    return opts, (dev, wire, dump)


def _choice(name: str, value: Any, choices: dict) -> int:
    """The C value of option `name` given as one of choices' names;
    ValueError for anything else."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, "
                         f"not {value!r}")
    return choices[value]


def _c_int(name: str, value: Any, bits: int) -> int:
    """An integer option for a C field of `bits`: an int (NumPy's too; a
    float is a TypeError, never cut), checked by the library; one past the
    field is the library's error class, InvalidArgumentError, not an
    OverflowError. A bool is a TypeError (cpu_devices=True is not 1)."""
    try:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"session options: {name} must be an int, not "
                        f"{type(value).__name__}") from None
    if not -(1 << (bits - 1)) <= v < 1 << (bits - 1):
        raise errors.InvalidArgumentError(
            f"session options: {name} {v} is out of range")
    return v


def _timeout_ms(timeout: Any) -> int:
    """collective_timeout_ms for `timeout` seconds: a real number (NumPy's
    too; a bool or str is a TypeError) > 0 and at most _TIMEOUT_MAX_S
    (else InvalidArgumentError naming it), rounded to whole milliseconds
    but at least 1."""
    if (isinstance(timeout, (bool, np.bool_)) or
            not isinstance(timeout, numbers.Real)):
        raise TypeError(f"session options: timeout must be a number of "
                        f"seconds, not {type(timeout).__name__}")
    try:
        s = float(timeout)
    except OverflowError:  # an int past float's range
        s = math.inf if timeout > 0 else -math.inf
    if not s > 0:  # nan too
        raise errors.InvalidArgumentError(
            f"session options: timeout must be a number of seconds > 0, "
            f"got {timeout}")
    if s > _TIMEOUT_MAX_S:
        raise errors.InvalidArgumentError(
            f"session options: timeout must be at most {_TIMEOUT_MAX_S} "
            f"seconds (about 31 years), got {timeout}")
    return max(1, round(s * 1000))


def _switch(name: str, value: Any) -> int:
    """An on/off option as the C int: True, False, 0 or 1 (NumPy's bools
    and ints too); another int is passed on for the library to refuse
    (InvalidArgumentError "<name> must be 0 or 1, got 2"), anything else
    (a float, a str) is a TypeError."""
    if isinstance(value, np.bool_):
        value = bool(value)
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"session options: {name} must be True or False "
                        f"(or 0 or 1), not {type(value).__name__}") from None
    return _c_int(name, v, 32)


def lower(graph: Optional[Graph] = None, **options: Any) -> Graph:
    """What a session with `options` (Session's keyword arguments) would
    run: a copy of `graph` (default: the default graph) after placement and
    the passes that lower collectives, each node's device its assigned one.
    Raises what Session() and compiling would (UnimplementedError for a
    collective joining CPU and GPU devices)."""
    graph = as_graph(graph, "lower")
    opts, keep = _options(**options)
    out = ffi.new("rf_graph **")
    with graph._lock:
        check(lib.rf_graph_lower(graph._c, opts, out), graph)
    del keep
    return Graph._wrap(out[0])


def _is_leaf(fetch: Any) -> bool:
    return isinstance(fetch, (Tensor, Operation)) or hasattr(
        fetch, "_as_tensor")


def _flatten(fetches: Any, flat: List[Any]) -> Callable[[Callable], Any]:
    """Appends the leaves of `fetches` to flat; returns a function that
    rebuilds the structure from a function of each leaf (called in order).
    """
    if isinstance(fetches, (list, tuple)):
        parts = [_flatten(f, flat) for f in fetches]
        kind = type(fetches)
        if issubclass(kind, tuple) and hasattr(kind, "_fields"):
            return lambda fn: kind(*[p(fn) for p in parts])  # a namedtuple
        # a list or tuple, or a subclass of one: built from an iterable
        return lambda fn: kind(p(fn) for p in parts)
    if isinstance(fetches, dict):
        parts = [(k, _flatten(v, flat)) for k, v in fetches.items()]
        kind = type(fetches)
        if isinstance(fetches, collections.defaultdict):
            # built from its default factory, then the items (as
            # TensorFlow's fetch mapper): kind(items) is a TypeError
            factory = fetches.default_factory
            return lambda fn: kind(factory, ((k, p(fn)) for k, p in parts))
        return lambda fn: kind((k, p(fn)) for k, p in parts)
    if hasattr(fetches, "_as_tensor"):
        fetches = fetches._as_tensor()
    if not isinstance(fetches, (Tensor, Operation)):
        raise TypeError(f"cannot fetch {fetches!r}: fetches are Tensors, "
                        "Variables, Operations, or lists, tuples and dicts "
                        "of them")
    flat.append(fetches)
    return lambda fn: fn(fetches)


def job_tasks() -> Tuple[int, int]:
    """(task, number of tasks) of this process in its MPI job, without a
    session: its rank and size when MPI is initialised or the process was
    started by mpirun/srun, else (0, 1). FailedPreconditionError when MPI
    cannot be initialised."""
    task, n = ffi.new("int *"), ffi.new("int *")
    check(lib.rf_job_tasks(task, n))
    return task[0], n[0]
