"""ringflow: differentiable multi-device collectives inside a dataflow graph.

A thin front end over the C library's public API (docs/PYTHON.md).
"""

from ringflow._ffi import lib as _lib

__version__ = "%d.%d.%d" % (_lib.RINGFLOW_VERSION_MAJOR,
                            _lib.RINGFLOW_VERSION_MINOR,
                            _lib.RINGFLOW_VERSION_PATCH)
