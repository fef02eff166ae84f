"""The C library through cffi, and the one place a C status becomes an
exception. Every other module calls the C API through `lib`."""

import os

from ringflow._ffi import ffi, lib

__all__ = ["ffi", "lib", "check", "text", "c_name", "c_path"]


def text(p) -> str:
    """A NUL-terminated C string (owned elsewhere) as str; "" for NULL."""
    if p == ffi.NULL:
        return ""
    return ffi.string(p).decode("utf-8", "replace")


def c_name(name):
    """A name argument for the C API: UTF-8 bytes, or NULL for None. A NUL
    character, where the C string would end, is an InvalidArgumentError
    (it would cut the name short: "x\\0y" would be "x")."""
    if name is None:
        return ffi.NULL
    if not isinstance(name, str):
        raise TypeError(f"a name must be a str, not {type(name).__name__}")
    if "\0" in name:
        from ringflow import errors
        raise errors.InvalidArgumentError(
            f"{name[:200]!r} holds a NUL character, which no name, device, "
            "path or string argument of the C library can hold")
    return name.encode("utf-8")


def c_path(path):
    """A file path argument (a str, bytes or os.PathLike) for the C API;
    InvalidArgumentError for a NUL byte in it, as c_name."""
    data = os.fsencode(path)
    if b"\0" in data:
        from ringflow import errors
        raise errors.InvalidArgumentError(
            f"path {data[:200]!r} holds a NUL byte, which a path cannot hold")
    return data


def check(status, graph=None) -> None:
    """Frees `status` and raises its ringflow.errors class unless it is NULL
    (success); `graph`: where to find a node whose name the message cuts
    (errors.OpError.node_name)."""
    if status != ffi.NULL:
        from ringflow import errors
        raise errors._from_status(status, graph)
