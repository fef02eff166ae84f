"""Generates the C source of ringflow's cffi extension (API mode).

The declarations come from the public headers themselves, run through the C
preprocessor, so the binding cannot drift from include/ringflow/*.h. The
extension module is compiled by python/CMakeLists.txt against those headers
and linked to libringflow.

    python build_ffi.py CC INCLUDE_DIR OUT.c
"""

import os
import re
import subprocess
import sys
import tempfile

import cffi

# What the extension binds: the whole public API.
HEADERS = ("ringflow/ringflow.h", "ringflow/collectives.h",
           "ringflow/graph_io.h", "ringflow/debug.h")

# The release callback of tensors fed from Python (ringflow/_convert.py).
PYTHON_CALLBACKS = """
extern "Python" void _rf_py_release(void *data, void *arg);
"""


def preprocess(cc, include_dir):
    """The headers with every macro expanded, as cffi's cdef reads them."""
    with tempfile.TemporaryDirectory() as tmp:
        # cffi knows the standard types itself; empty system headers keep the
        # preprocessor from pulling in glibc's declarations.
        for name in ("stdbool.h", "stddef.h", "stdint.h", "stdarg.h"):
            open(os.path.join(tmp, name), "w").close()
        src = os.path.join(tmp, "all.h")
        with open(src, "w") as f:
            f.writelines(f"#include <{h}>\n" for h in HEADERS)
        out = subprocess.run(
            [cc, "-E", "-P", "-nostdinc", "-I", tmp, "-I", include_dir,
             "-D__attribute__(x)=", src],
            check=True, capture_output=True, text=True).stdout
    return out


def integer_macros(include_dir):
    """#define NAME <integer> of the headers, as cdef constants."""
    names = []
    folder = os.path.join(include_dir, "ringflow")
    for h in sorted(os.listdir(folder)):
        with open(os.path.join(folder, h)) as f:
            for line in f:
                m = re.match(r"#define\s+(R[A-Z0-9_]+)\s+\(?-?\d+\)?\s*$",
                             line)
                if m:
                    names.append(m.group(1))
    return "".join(f"#define {n} ...\n" for n in names)


def main(argv):
    cc, include_dir, out = argv[1:4]
    ffi = cffi.FFI()
    ffi.cdef(preprocess(cc, include_dir) + integer_macros(include_dir) +
             PYTHON_CALLBACKS)
    ffi.set_source("ringflow._ffi",
                   "".join(f"#include <{h}>\n" for h in HEADERS))
    ffi.emit_c_code(out)


if __name__ == "__main__":
    main(sys.argv)
