"""The README's Python example and the package docstring's run as
written, so they cannot go stale."""

import os
import re

import numpy as np

import ringflow as rf

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_readme_example():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 1
    scope = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    g0, g1 = scope["g0"], scope["g1"]
    np.testing.assert_array_equal(g0, g1)
    # Against NumPy: the sum over both replicas of x^T relu'(x w).
    feeds, xs, ws = scope["feeds"], scope["xs"], scope["ws"]
    want = sum(feeds[x].astype(np.float64).T @
               (feeds[x].astype(np.float64) @ feeds[w] > 0)
               for x, w in zip(xs, ws))
    np.testing.assert_allclose(g0, want, rtol=1e-5, atol=1e-5)


def test_package_docstring_example(capsys):
    code = re.search(r"\n\n    (import numpy.*?)\n\"?\"?\"?$", rf.__doc__,
                     re.S).group(1)
    exec(compile(re.sub(r"(?m)^    ", "", code), "ringflow", "exec"), {})
    assert "array([3., 3., 3.]" in capsys.readouterr().out
