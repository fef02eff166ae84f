"""Sessions: compile a graph once per (feeds, fetches, targets) and run it.

A Session wraps a C rf_session over a copy of its graph. Several Python
threads may call run() on one session at once: each call is one step, and
the C library runs it with the GIL released.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

from ringflow import _convert, errors
from ringflow._lib import c_name, check, ffi, lib
from ringflow.framework import Graph, Operation, Tensor, get_default_graph

__all__ = ["Session", "job_tasks", "lower"]

_NOT_IN_SESSION = (
    " (a session runs a copy of its graph made when the Session was made: "
    "nodes added to the graph after the Session are not in it, so build "
    "everything, global_variables_initializer() included, first)")

_JOBS = {"auto": lib.RF_JOB_AUTO, "single": lib.RF_JOB_SINGLE,
         "mpi": lib.RF_JOB_MPI}


class Session:
    """A session running `graph` (default: the default graph) on virtual
    devices: cpu:0..cpu_devices-1 and gpu:0..gpu_devices-1.

    cpu_devices, gpu_devices: device counts (1..64 and 0..64); gpu:i runs
      on physical GPU i % (number of GPUs).
    timeout: seconds a collective waits for its participants (default 300)
      before failing with DeadlineExceededError.
    threads: worker threads shared by the devices (0: one a core).
    default_device: for nodes with no device and no placed input ("cpu:0").
    job: "auto" (one task of an MPI job when the graph names tasks and the
      process runs under an MPI launcher), "single" or "mpi".
    gpu_sync_on_finish: False lets runs return once their GPU work is
      queued (see sync()).
    Raises InvalidArgumentError when a node requests a device the session
    lacks (naming node, op and device), FailedPreconditionError for GPU
    devices without a usable GPU ("no GPU: <reason>").

    Use it as a context manager, or call close(). The graph is copied: ops
    added to it afterwards are not in the session.
    """

    def __init__(self, graph: Optional[Graph] = None, cpu_devices: int = 1,
                 gpu_devices: int = 0, timeout: Optional[float] = None,
                 threads: int = 0, default_device: Optional[str] = None,
                 job: str = "auto", gpu_sync_on_finish: bool = True) -> None:
        self._graph = graph if graph is not None else get_default_graph()
        opts, keep = _options(cpu_devices, gpu_devices, timeout, threads,
                              default_device, job, gpu_sync_on_finish)
        out = ffi.new("rf_session **")
        with self._graph._lock:
            check(lib.rf_session_new(self._graph._c, opts, out))
        del keep
        self._c = out[0]

    @property
    def graph(self) -> Graph:
        """The graph the session was made from."""
        return self._graph

    @property
    def task(self) -> Tuple[int, int]:
        """(task, number of tasks) of this session's MPI job; (0, 1) for one
        process."""
        task, n = ffi.new("int *"), ffi.new("int *")
        lib.rf_session_task(self._live(), task, n)
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
        DeadlineExceededError for a collective missing participants...).
        The session stays usable after an error.
        """
        flat: List[Any] = []
        rebuild = _flatten(fetches, flat)
        tensors = [f for f in flat if isinstance(f, Tensor)]
        targets = [f for f in flat if isinstance(f, Operation)]
        feeds = list((feed_dict or {}).items())
        c_feeds = ffi.new("rf_feed[]", max(len(feeds), 1))
        keep = []  # the fed tensors, until the run returns
        for i, (key, value) in enumerate(feeds):
            if not isinstance(key, Tensor):
                raise TypeError(f"feed_dict keys must be Tensors, not "
                                f"{key!r}")
            t = _convert.feed_to_c(value, key.dtype, key._code)
            keep.append(t)
            c_feeds[i].output = key._c
            c_feeds[i].value = t
        c_fetches = ffi.new("rf_output[]", max(len(tensors), 1))
        for i, t in enumerate(tensors):
            c_fetches[i] = t._c
        c_targets = ffi.new("rf_node *[]", max(len(targets), 1))
        for i, op in enumerate(targets):
            c_targets[i] = op._c
        outs = ffi.new("rf_tensor *[]", max(len(tensors), 1))
        try:
            check(lib.rf_session_run(self._live(), c_feeds, len(feeds),
                                     c_fetches, len(tensors), c_targets,
                                     len(targets), outs))
        except errors.NotFoundError as e:
            if "is not in the session's graph" in e.message:
                e.message += _NOT_IN_SESSION
                e.args = (e.message,)
            raise
        values = iter([_convert.to_numpy(outs[i])
                       for i in range(len(tensors))])
        del keep
        return rebuild(lambda f: next(values) if isinstance(f, Tensor)
                       else None)

    def sync(self) -> None:
        """Waits for the GPU work of returned steps (gpu_sync_on_finish
        False) and raises the first error found after its step returned."""
        check(lib.rf_session_sync(self._live()))

    def trace_next_run(self, path: str) -> None:
        """Makes the next run write a Chrome trace of its kernels to `path`
        (open it in Perfetto); a failure to write is that run's error."""
        check(lib.rf_session_trace_next_run(self._live(), c_name(path)))

    def close(self) -> None:
        """Frees the session (no run may be in progress); idempotent."""
        c, self._c = getattr(self, "_c", None), None
        if c is not None:
            lib.rf_session_free(c)

    def _live(self):
        if self._c is None:
            raise RuntimeError("the session is closed")
        return self._c

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def _options(cpu_devices: int = 1, gpu_devices: int = 0,
             timeout: Optional[float] = None, threads: int = 0,
             default_device: Optional[str] = None, job: str = "auto",
             gpu_sync_on_finish: bool = True):
    """rf_session_options (and what its pointers point to, to keep alive
    while they are used)."""
    opts = ffi.new("rf_session_options *")
    lib.rf_session_options_init(opts)
    opts.num_cpu_devices = int(cpu_devices)
    opts.num_gpu_devices = int(gpu_devices)
    opts.num_threads = int(threads)
    if timeout is not None:
        opts.collective_timeout_ms = int(round(float(timeout) * 1000))
    dev = c_name(default_device)
    if default_device is not None:
        opts.default_device = dev
    if job not in _JOBS:
        raise ValueError(f"job must be one of {', '.join(_JOBS)}")
    opts.job = _JOBS[job]
    opts.gpu_sync_on_finish = 1 if gpu_sync_on_finish else 0
    return opts, dev


def lower(graph: Optional[Graph] = None, **options: Any) -> Graph:
    """What a session with `options` (Session's keyword arguments) would
    run: a copy of `graph` (default: the default graph) after placement and
    the passes that lower collectives, each node's device its assigned one.
    Raises what Session() and compiling would (UnimplementedError for a
    collective joining CPU and GPU devices)."""
    graph = graph if graph is not None else get_default_graph()
    opts, keep = _options(**options)
    out = ffi.new("rf_graph **")
    with graph._lock:
        check(lib.rf_graph_lower(graph._c, opts, out))
    del keep
    return Graph._wrap(out[0])


def _flatten(fetches: Any, flat: List[Any]) -> Callable[[Callable], Any]:
    """Appends the leaves of `fetches` to flat; returns a function that
    rebuilds the structure from a function of each leaf (called in order).
    """
    if isinstance(fetches, (list, tuple)):
        parts = [_flatten(f, flat) for f in fetches]
        kind = type(fetches)
        if kind not in (list, tuple):  # a namedtuple
            return lambda fn: kind(*[p(fn) for p in parts])
        return lambda fn: kind(p(fn) for p in parts)
    if isinstance(fetches, dict):
        parts = [(k, _flatten(v, flat)) for k, v in fetches.items()]
        kind = type(fetches)
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
