"""The C library through cffi, and the one place a C status becomes an
exception. Every other module calls the C API through `lib`."""

from ringflow._ffi import ffi, lib

__all__ = ["ffi", "lib", "check", "text", "c_name"]


def text(p) -> str:
    """A NUL-terminated C string (owned elsewhere) as str; "" for NULL."""
    if p == ffi.NULL:
        return ""
    return ffi.string(p).decode("utf-8", "replace")


def c_name(name):
    """A name argument for the C API: UTF-8 bytes, or NULL for None."""
    if name is None:
        return ffi.NULL
    if not isinstance(name, str):
        raise TypeError(f"a name must be a str, not {type(name).__name__}")
    return name.encode("utf-8")


def check(status) -> None:
    """Frees `status` and raises its ringflow.errors class unless it is NULL
    (success)."""
    if status != ffi.NULL:
        from ringflow import errors
        raise errors._from_status(status)
