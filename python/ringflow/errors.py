"""Exceptions for the C library's status codes, as tf.errors has them.

Every call into ringflow that the C library refuses raises the subclass of
`OpError` for the status code: `InvalidArgumentError` for INVALID_ARGUMENT,
and so on, one class per code of include/ringflow/status.h (the code numbers
are TensorFlow's). Each carries `.code`, `.message` (the C message, which
names the node, op and device) and `.node_name` (the first node the message
names, or None). `InvalidArgumentError` is also a `ValueError`, so code
written for tf.contrib.nccl's graph-building checks (`ValueError`) keeps
working.
"""

import re
from typing import Dict, Optional, Type

from ringflow._lib import lib, text

__all__ = [
    "OpError", "CancelledError", "UnknownError", "InvalidArgumentError",
    "DeadlineExceededError", "NotFoundError", "AlreadyExistsError",
    "PermissionDeniedError", "ResourceExhaustedError",
    "FailedPreconditionError", "AbortedError", "OutOfRangeError",
    "UnimplementedError", "InternalError", "UnavailableError",
    "DataLossError", "exception_type_from_error_code", "OK", "CANCELLED",
    "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
]

# The codes, from the C enum (rf_code).
OK = lib.RF_OK
CANCELLED = lib.RF_CANCELLED
UNKNOWN = lib.RF_UNKNOWN
INVALID_ARGUMENT = lib.RF_INVALID_ARGUMENT
DEADLINE_EXCEEDED = lib.RF_DEADLINE_EXCEEDED
NOT_FOUND = lib.RF_NOT_FOUND
ALREADY_EXISTS = lib.RF_ALREADY_EXISTS
PERMISSION_DENIED = lib.RF_PERMISSION_DENIED
RESOURCE_EXHAUSTED = lib.RF_RESOURCE_EXHAUSTED
FAILED_PRECONDITION = lib.RF_FAILED_PRECONDITION
ABORTED = lib.RF_ABORTED
OUT_OF_RANGE = lib.RF_OUT_OF_RANGE
UNIMPLEMENTED = lib.RF_UNIMPLEMENTED
INTERNAL = lib.RF_INTERNAL
UNAVAILABLE = lib.RF_UNAVAILABLE
DATA_LOSS = lib.RF_DATA_LOSS


class OpError(Exception):
    """An error the C library reported: the base of every class here.

    Attributes:
      code: the status code (an int, e.g. errors.INVALID_ARGUMENT).
      message: the C status message; it names the node, op and device.
      node_name: the first node the message names ("node 'x'"), or None;
        for a name the message cuts (past 200 bytes: "<first 200>...
        (N bytes)") the whole name of the graph's one node it fits, else
        None.
    """

    code: int = UNKNOWN

    def __init__(self, message: str, code: Optional[int] = None,
                 node_name: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.node_name = node_name

    @property
    def error_code(self) -> int:
        """The status code (tf.errors.OpError's name for `code`)."""
        return self.code

    def __str__(self) -> str:
        return self.message


class CancelledError(OpError):
    """CANCELLED: the step was cancelled (another device of it failed)."""

    code = CANCELLED


class UnknownError(OpError):
    """UNKNOWN: an unknown error."""

    code = UNKNOWN


class InvalidArgumentError(OpError, ValueError):
    """INVALID_ARGUMENT: a bad argument, dtype, shape, device or attribute,
    at graph building or at run time. Also a ValueError.
    """

    code = INVALID_ARGUMENT


class DeadlineExceededError(OpError):
    """DEADLINE_EXCEEDED: a collective's participants did not all come within
    the session's timeout.
    """

    code = DEADLINE_EXCEEDED


class NotFoundError(OpError):
    """NOT_FOUND: a node, kernel or file that does not exist."""

    code = NOT_FOUND


class AlreadyExistsError(OpError):
    """ALREADY_EXISTS: a node name already used in the graph."""

    code = ALREADY_EXISTS


class PermissionDeniedError(OpError):
    """PERMISSION_DENIED."""

    code = PERMISSION_DENIED


class ResourceExhaustedError(OpError):
    """RESOURCE_EXHAUSTED: memory (host or device) ran out."""

    code = RESOURCE_EXHAUSTED


class FailedPreconditionError(OpError):
    """FAILED_PRECONDITION: the state does not allow it (a variable read
    before it was assigned, GPU devices without a GPU).
    """

    code = FAILED_PRECONDITION


class AbortedError(OpError):
    """ABORTED."""

    code = ABORTED


class OutOfRangeError(OpError):
    """OUT_OF_RANGE: a value out of range."""

    code = OUT_OF_RANGE


class UnimplementedError(OpError):
    """UNIMPLEMENTED: no kernel or backend for it (a collective joining CPU
    and GPU devices).
    """

    code = UNIMPLEMENTED


class InternalError(OpError):
    """INTERNAL: a broken invariant (a bug)."""

    code = INTERNAL


class UnavailableError(OpError):
    """UNAVAILABLE: a device or process cannot be reached."""

    code = UNAVAILABLE


class DataLossError(OpError):
    """DATA_LOSS: a corrupt file or message."""

    code = DATA_LOSS


_BY_CODE: Dict[int, Type[OpError]] = {
    cls.code: cls for cls in (
        CancelledError, UnknownError, InvalidArgumentError,
        DeadlineExceededError, NotFoundError, AlreadyExistsError,
        PermissionDeniedError, ResourceExhaustedError,
        FailedPreconditionError, AbortedError, OutOfRangeError,
        UnimplementedError, InternalError, UnavailableError, DataLossError)}

# "node 'x'", and the node of "node name 'x' ..." and of a graph file's
# "node 3 'x'".
_NODE = re.compile(r"node (?:name |\d+ )?'([^']*)'")
# A name the library's messages cut (past RF_STATUS_QUOTE_MAX, 200 bytes):
# its first bytes, then "... (N bytes)" (node names hold no spaces).
_CUT = re.compile(r"(.*)\.\.\. \((\d+) bytes\)", re.S)


def exception_type_from_error_code(code: int) -> Type[OpError]:
    """The class for a status code (UnknownError for one it does not know)."""
    return _BY_CODE.get(code, UnknownError)


def _from_status(status, graph=None) -> OpError:
    """The exception for a C status, which it frees. `graph` (a Graph, or
    None) is where a node name the message cuts is looked for."""
    code = lib.rf_status_code(status)
    message = text(lib.rf_status_message(status))
    lib.rf_status_free(status)
    m = _NODE.search(message)
    return exception_type_from_error_code(code)(
        message, code, _node_name(m.group(1), graph) if m else None)


def _node_name(quoted: str, graph) -> Optional[str]:
    """The node a message quotes: its name, or for a name the message
    cuts ("<first 200 bytes>... (N bytes)") the one node of `graph` with
    those first bytes and that length, else None (never the cut text,
    which no node is named)."""
    cut = _CUT.fullmatch(quoted)
    if cut is None:
        return quoted
    if graph is None:
        return None
    head, size = cut.group(1), int(cut.group(2))
    found = None
    with graph._lock:
        for i in range(lib.rf_graph_num_nodes(graph._c)):
            name = text(lib.rf_node_name(lib.rf_graph_node(graph._c, i)))
            if len(name) == size and name.startswith(head):
                if found is not None:
                    return None  # two such nodes: not known which
                found = name
    return found

