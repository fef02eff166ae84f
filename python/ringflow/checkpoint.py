"""Checkpoints as safetensors files, through the C library's
ringflow/checkpoint.h: what `ringflow train --save` writes, and what
PyTorch, JAX and NumPy read (`safetensors.numpy.load_file`) and write.

    import ringflow as rf
    rf.checkpoint.save("model.safetensors", {"w": w}, step=100)
    ckpt = rf.checkpoint.load("model.safetensors")
    ckpt.tensors["w"], ckpt.step, ckpt.metadata

    rf.checkpoint.save_variables(sess, "vars.safetensors")
    rf.checkpoint.restore_variables(sess, "vars.safetensors")

Writes are atomic (a random temporary name in the target's directory,
fsync, rename, fsync of the directory; a symlink at the path is replaced,
not followed) and reads are bounded by the file's size and check its CRC.
Errors are ringflow.errors classes: NotFoundError (no such file or
tensor), PermissionDeniedError, InvalidArgumentError (a directory,
device or FIFO as the path, a path or name holding a NUL character, a
name, dtype, shape or value mismatch),
DataLossError (truncated or corrupt: bad header, offsets, CRC),
UnimplementedError (a dtype ringflow lacks, such as I16),
ResourceExhaustedError (disk full, out of memory).
"""

import operator
import os
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Union

import numpy as np

from ringflow import dtypes, errors
from ringflow._convert import as_array, c_shape, feed_to_c, to_numpy
from ringflow._lib import c_name, c_path, check, ffi, lib, text
from ringflow.variables import Variable

__all__ = ["Checkpoint", "save", "load", "save_variables",
           "restore_variables"]

#: The largest step a checkpoint holds (2**53, exact in a float64).
STEP_MAX = 1 << 53


class Checkpoint(NamedTuple):
    """A loaded checkpoint. tensors: name -> read-only NumPy array (over
    the memory the C reader filled, no copy), in file order; step: the
    "ringflow.step" metadata, None when the file has none; metadata: the
    other string metadata."""
    tensors: Dict[str, np.ndarray]
    step: Optional[int]
    metadata: Dict[str, str]


def _new():
    out = ffi.new("rf_checkpoint **")
    check(lib.rf_checkpoint_new(out))
    return ffi.gc(out[0], lib.rf_checkpoint_free)


Path = Union[str, "os.PathLike[str]"]


def save(path: Path, tensors: Mapping[str, Any], step: Optional[int] = None,
         metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes `tensors` (name -> array or value; converted as
    ringflow.constant does, so floats become float32 unless an array says
    otherwise; C-contiguous arrays are not copied) to `path` in that order,
    with `step` (0..STEP_MAX) and string `metadata` (keys not starting with
    "ringflow."). Dtypes: float16, bfloat16, float32, float64, int8, uint8,
    int32, int64, bool. The file's mode is 0644. Raises TypeError for a
    step that is not an int (a bool, 1.5) and for values ringflow has no
    dtype for (uint16, strings, ints past int64), InvalidArgumentError for
    a bad name, a step out of range or a reserved metadata key, and the
    errors of the module doc."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"save: tensors must be a mapping of name -> array "
                        f"(a dict), not {type(tensors).__name__}")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise TypeError(f"save: metadata must be a mapping of str -> str "
                        f"(a dict), not {type(metadata).__name__}")
    for key, value in (metadata or {}).items():
        for what, v in (("key", key), ("value", value)):
            if not isinstance(v, str):
                raise TypeError(f"save: metadata {what} {v!r} "
                                f"must be a str, not {type(v).__name__}")
    c = _new()
    keep = []
    for name, value in tensors.items():
        arr = as_array(value)
        t = feed_to_c(arr, arr.dtype, dtypes.to_c(arr.dtype))
        keep.append(t)
        check(lib.rf_checkpoint_add(c, c_name(name), t))
    if step is not None:
        if isinstance(step, bool):  # an int to operator.index: True is 1
            raise TypeError("checkpoint step must be an int, not bool")
        try:
            step = operator.index(step)  # TypeError for 1.5, not 1
        except TypeError:
            raise TypeError(f"checkpoint step must be an int, not "
                            f"{type(step).__name__}") from None
        if not 0 <= step <= STEP_MAX:  # past int64 cffi would overflow
            raise errors.InvalidArgumentError(
                f"checkpoint step {step} is not in 0..{STEP_MAX}")
        check(lib.rf_checkpoint_set_step(c, step))
    for key, value in (metadata or {}).items():
        check(lib.rf_checkpoint_set_metadata(c, c_name(key), c_name(value)))
    check(lib.rf_checkpoint_save(c, c_path(path)))
    del keep


def _open(path: Path):
    out = ffi.new("rf_checkpoint **")
    check(lib.rf_checkpoint_load(c_path(path), out))
    return ffi.gc(out[0], lib.rf_checkpoint_free)


def _array(t) -> np.ndarray:
    return to_numpy(lib.rf_tensor_retain(t))


def load(path: Path) -> Checkpoint:
    """Reads a safetensors file (ringflow's, or any writer's for the dtypes
    save lists); raises the errors of the module doc."""
    c = _open(path)
    tensors = {}
    for i in range(lib.rf_checkpoint_count(c)):
        tensors[text(lib.rf_checkpoint_name(c, i))] = _array(
            lib.rf_checkpoint_tensor(c, i))
    metadata = {}
    i = 0
    while (key := lib.rf_checkpoint_metadata_key(c, i)) != ffi.NULL:
        metadata[text(key)] = text(lib.rf_checkpoint_metadata(c, key))
        i += 1
    step = lib.rf_checkpoint_step(c)
    return Checkpoint(tensors, None if step < 0 else int(step), metadata)


def _variables(sess, variables):
    if variables is None:
        return list(sess.graph._variables)
    variables = list(variables)
    for v in variables:
        if not isinstance(v, Variable):
            raise TypeError(f"{v!r} is not a Variable")
    return variables


def save_variables(sess, path: Path, variables: Optional[List[Any]] = None,
                   step: Optional[int] = None,
                   metadata: Optional[Mapping[str, str]] = None) -> None:
    """Saves the values the Variables (default: every Variable of the
    session's graph) hold in `sess`, each under its name (Variable.name),
    as save() does. Raises TypeError for an item of `variables` that is
    not a Variable, FailedPreconditionError for a variable not yet
    initialised, and the errors of save()."""
    variables = _variables(sess, variables)
    values = sess.run([v.value() for v in variables])
    save(path, {v.name: x for v, x in zip(variables, values)}, step,
         metadata)


def restore_variables(sess, path: Path,
                      variables: Optional[List[Any]] = None,
                      finite: bool = False) -> Optional[int]:
    """Assigns each Variable (default: every Variable of the session's
    graph) the tensor of its name in the checkpoint at `path`, after
    checking all of them: the tensor must exist (NotFoundError), have the
    variable's dtype and, where the variable's shape is known, its shape
    (InvalidArgumentError naming both), and with finite=True hold no NaN or
    infinity (InvalidArgumentError naming the element). Nothing is
    assigned unless every check passes. The assignment runs the variables'
    initializers with their initial values fed, so it adds nothing to the
    graph: one run, or one more for each further variable made from the
    same initial-value Tensor (one run feeds a tensor one value). Returns
    the checkpoint's step (None when it has none). An item of `variables`
    that is not a Variable is a TypeError."""
    variables = _variables(sess, variables)
    c = _open(path)
    # Runs of the initializers, each with the values of its variables fed
    # to what their initializers assign: variables that share that tensor
    # (Variable(t) twice for one Tensor t) go to runs of their own, since
    # one run feeds a tensor one value.
    runs: List[Dict[Any, Any]] = []
    for v in variables:
        out = ffi.new("rf_tensor **")
        shape = v.shape
        known = shape is not None and all(d is not None for d in shape)
        cs = ffi.new("rf_shape *", c_shape(shape)) if known else ffi.NULL
        check(lib.rf_checkpoint_get(
            c, c_name(v.name), dtypes.to_c(v.dtype), cs,
            lib.RF_CHECKPOINT_FINITE if finite else 0, out))
        value = _array(out[0])
        if not known and shape is not None and (
                len(value.shape) != len(shape) or
                any(d is not None and d != e
                    for d, e in zip(shape, value.shape))):
            raise errors.InvalidArgumentError(
                f"checkpoint tensor '{v.name}' has shape {value.shape}; "
                f"the variable's is {shape}")
        # What the initializer assigns (the initial value, or with a
        # relaxed shape a tensor of that shape).
        for feeds in runs:
            if v._assigned not in feeds:
                break
        else:
            feeds = {}
            runs.append(feeds)
        feeds[v._assigned] = (v, value)
    for feeds in runs:
        sess.run([v.initializer for v, _ in feeds.values()],
                 {t: value for t, (_, value) in feeds.items()})
    step = lib.rf_checkpoint_step(c)
    return None if step < 0 else int(step)
