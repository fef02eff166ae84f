"""ringflow.checkpoint: files ringflow writes (`ringflow train --save`, the
Python API) read by the safetensors package, files safetensors writes read
by ringflow, session variables saved and restored, and the errors."""

import json
import os
import struct
import subprocess

import ml_dtypes
import numpy as np
import pytest

import ringflow as rf

safetensors_numpy = pytest.importorskip("safetensors.numpy")
from safetensors import safe_open  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DATA = "/usr/share/datasets/fashion-mnist"

DTYPES = [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int32,
          np.int64, np.bool_]


def _ringflow_bin():
    """The `ringflow` command: RF_RINGFLOW_BIN (scripts/test.sh sets it),
    else the first build tree's."""
    path = os.environ.get("RF_RINGFLOW_BIN")
    if path:
        return path
    for d in ("build", "build-nc", "build-nocuda"):
        p = os.path.join(ROOT, d, "tools", "ringflow")
        if os.access(p, os.X_OK):
            return p
    return None


def _random(rng, dtype, shape):
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000),
                            shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def test_train_save_reads_in_safetensors(tmp_path):
    exe = _ringflow_bin()
    if exe is None:
        pytest.skip("no ringflow command built (set RF_RINGFLOW_BIN)")
    if not os.path.isdir(DATA):
        pytest.skip(f"no Fashion-MNIST in {DATA}")
    path = str(tmp_path / "mlp.safetensors")
    subprocess.run([exe, "train", "--steps", "7", "--epochs", "1",
                    "--quiet", "--save", path], check=True,
                   stdout=subprocess.DEVNULL)
    theirs = safetensors_numpy.load_file(path)
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    assert meta["ringflow.step"] == "7"
    ours = rf.checkpoint.load(path)
    assert ours.step == 7
    names = [f"{k}{p}{i}" for k in ("", "m_", "v_") for i in range(3)
             for p in "Wb"]
    assert sorted(theirs) == sorted(names) == sorted(ours.tensors)
    sizes = [784, 512, 256, 10]
    for i in range(3):
        assert theirs[f"W{i}"].shape == (sizes[i], sizes[i + 1])
        assert theirs[f"b{i}"].shape == (sizes[i + 1],)
    for name in names:
        assert theirs[name].dtype == np.float32
        np.testing.assert_array_equal(theirs[name], ours.tensors[name])
        assert np.isfinite(theirs[name]).all()
    assert all((theirs[f"v_{p}{i}"] >= 0).all() for i in range(3)
               for p in "Wb")
    assert np.abs(theirs["m_W0"]).max() > 0  # 7 Adam steps moved something


def test_python_save_reads_in_safetensors(tmp_path, rng):
    values = {f"t.{np.dtype(d).name}": _random(rng, d, s) for d, s in
              zip(DTYPES, [(3, 5), (), (7,), (2, 0, 4), (2, 1, 3), (4,),
                           (1, 1), (9,)])}
    path = str(tmp_path / "py.safetensors")
    rf.checkpoint.save(path, values, step=42, metadata={"who": "test"})
    theirs = safetensors_numpy.load_file(path)
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    assert meta["ringflow.step"] == "42" and meta["who"] == "test"
    assert list(theirs) == list(values) or sorted(theirs) == sorted(values)
    for name, want in values.items():
        assert theirs[name].dtype == want.dtype
        assert theirs[name].shape == want.shape
        np.testing.assert_array_equal(theirs[name], want)
    back = rf.checkpoint.load(tmp_path / "py.safetensors")  # a PathLike too
    assert back.step == 42 and back.metadata == {"who": "test"}
    assert list(back.tensors) == list(values)  # file order is save order
    for name, want in values.items():
        np.testing.assert_array_equal(back.tensors[name], want)
    assert os.stat(path).st_mode & 0o777 == 0o644


def test_bfloat16_round_trip(tmp_path, rng):
    x = rng.standard_normal((4, 3)).astype(ml_dtypes.bfloat16)
    path = str(tmp_path / "bf.safetensors")
    rf.checkpoint.save(path, {"x": x})
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        assert json.loads(f.read(n))["x"]["dtype"] == "BF16"
    back = rf.checkpoint.load(path).tensors["x"]
    assert back.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(back.view(np.uint16), x.view(np.uint16))


def test_safetensors_file_loads_into_ringflow(tmp_path, rng):
    values = {f"w{i}": _random(rng, d, (i + 1, 3)) for i, d in
              enumerate(DTYPES)}
    path = str(tmp_path / "theirs.safetensors")
    safetensors_numpy.save_file(values, path, metadata={"format": "np"})
    back = rf.checkpoint.load(path)
    assert back.step is None  # no ringflow.step, no CRC: loaded unchecked
    assert back.metadata == {"format": "np"}
    for name, want in values.items():
        assert back.tensors[name].dtype == want.dtype
        np.testing.assert_array_equal(back.tensors[name], want)


def _model():
    with rf.Graph().as_default() as g:
        with rf.device("cpu:1"):
            w = rf.Variable(np.zeros((3, 4), np.float32), name="w")
        b = rf.Variable(np.zeros(4, np.float64), name="b")
        n = rf.Variable(np.int32(0), name="n")
        init = rf.global_variables_initializer()
    return g, [w, b, n], init


def test_session_variables_round_trip(tmp_path, rng):
    g, (w, b, n), init = _model()
    wv = rng.standard_normal((3, 4)).astype(np.float32)
    bv = rng.standard_normal(4)
    path = str(tmp_path / "vars.safetensors")
    with rf.Session(g, cpu_devices=2) as sess:
        sess.run(init, {w.initial_value: wv, b.initial_value: bv,
                        n.initial_value: np.int32(5)})
        rf.checkpoint.save_variables(sess, path, step=3)
    theirs = safetensors_numpy.load_file(path)
    np.testing.assert_array_equal(theirs["w"], wv)
    np.testing.assert_array_equal(theirs["b"], bv)
    assert theirs["n"] == 5
    g2, (w2, b2, n2), init2 = _model()
    with rf.Session(g2, cpu_devices=2) as sess:
        sess.run(init2)
        assert rf.checkpoint.restore_variables(sess, path) == 3
        got = sess.run([w2, b2, n2])
    np.testing.assert_array_equal(got[0], wv)
    np.testing.assert_array_equal(got[1], bv)
    assert got[2] == 5


def test_restore_checks_before_assigning(tmp_path):
    g, (w, b, n), init = _model()
    path = str(tmp_path / "bad.safetensors")
    with rf.Session(g, cpu_devices=2) as sess:
        sess.run(init)
        rf.checkpoint.save(path, {"w": np.ones((4, 3), np.float32),
                                  "b": np.ones(4), "n": np.int32(1)})
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match=r"'w' is float32 \[4,3\]; expected float32 "
                                 r"\[3,4\]"):
            rf.checkpoint.restore_variables(sess, path)
        rf.checkpoint.save(path, {"w": np.ones((3, 4), np.float32),
                                  "b": np.ones(4)})
        with pytest.raises(rf.errors.NotFoundError, match="no tensor 'n'"):
            rf.checkpoint.restore_variables(sess, path)
        bad = np.ones((3, 4), np.float32)
        bad[1, 2] = np.nan
        rf.checkpoint.save(path, {"w": bad, "b": np.ones(4),
                                  "n": np.int32(1)})
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match="'w' element 6 is nan"):
            rf.checkpoint.restore_variables(sess, path, finite=True)
        # nothing was assigned by the refused restores
        np.testing.assert_array_equal(sess.run(b), np.zeros(4))


def test_errors(tmp_path):
    with pytest.raises(rf.errors.NotFoundError):
        rf.checkpoint.load(str(tmp_path / "none"))
    with pytest.raises(rf.errors.InvalidArgumentError,
                       match="not a regular file"):
        rf.checkpoint.load("/dev/zero")
    path = str(tmp_path / "x.safetensors")
    rf.checkpoint.save(path, {"a": np.arange(10, dtype=np.float32)})
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 1
    open(path, "wb").write(bytes(data))
    with pytest.raises(rf.errors.DataLossError, match="CRC mismatch"):
        rf.checkpoint.load(path)
    open(path, "wb").write(bytes(data[:-5]))
    with pytest.raises(rf.errors.DataLossError):
        rf.checkpoint.load(path)
    with pytest.raises(rf.errors.InvalidArgumentError, match="step"):
        rf.checkpoint.save(path, {}, step=-5)
    with pytest.raises(rf.errors.InvalidArgumentError, match="reserved"):
        rf.checkpoint.save(path, {}, metadata={"ringflow.step": "1"})
    with pytest.raises(rf.errors.InvalidArgumentError,
                       match="names a directory"):
        rf.checkpoint.save(str(tmp_path), {"a": np.ones(1)})
    with pytest.raises(rf.errors.NotFoundError):
        rf.checkpoint.save(str(tmp_path / "no" / "x"), {"a": np.ones(1)})
    # I16 has no ringflow dtype
    safetensors_numpy.save_file({"s": np.ones(2, np.int16)}, path)
    with pytest.raises(rf.errors.UnimplementedError, match="'I16'"):
        rf.checkpoint.load(path)


def test_step_must_be_an_int_in_range(tmp_path):
    """step is 0..STEP_MAX: a float is a TypeError (not cut to an int), a
    huge int the library's InvalidArgumentError (not an OverflowError)."""
    path = str(tmp_path / "s.safetensors")
    with pytest.raises(TypeError):
        rf.checkpoint.save(path, {"a": np.ones(1)}, step=1.5)
    with pytest.raises(TypeError, match="bool"):  # not saved as step 1
        rf.checkpoint.save(path, {"a": np.ones(1)}, step=True)
    for step in (rf.checkpoint.STEP_MAX + 1, 2**70, -(2**70)):
        with pytest.raises(rf.errors.InvalidArgumentError, match="step"):
            rf.checkpoint.save(path, {"a": np.ones(1)}, step=step)
    assert not os.path.exists(path)
    rf.checkpoint.save(path, {"a": np.ones(1)}, step=np.int64(12))
    assert rf.checkpoint.load(path).step == 12


def test_byte_swapped_arrays_save_as_their_dtype(tmp_path):
    """'>f4' is float32 to NumPy, so to ringflow too (values as given)."""
    path = str(tmp_path / "b.safetensors")
    w = np.arange(6, dtype=">f4").reshape(2, 3)
    rf.checkpoint.save(path, {"w": w})
    got = rf.checkpoint.load(path).tensors["w"]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, w.astype(np.float32))


def test_restore_relaxed_shape(tmp_path, rng):
    """A Variable whose shape was relaxed (shape=(None, 3)) restores a
    checkpoint value of another size along the unknown dim, and a value
    whose known dims differ is refused naming both shapes, before anything
    is assigned (PYTHON.md: the known shape must match)."""
    g = rf.Graph()
    with g.as_default():
        v = rf.Variable(np.zeros((2, 3), np.float32), name="v",
                        shape=(None, 3))
        w = rf.Variable(np.ones(4), name="w")
        init = rf.global_variables_initializer()
    assert v.shape == (None, 3)
    wider = rng.standard_normal((5, 3)).astype(np.float32)
    w_new = rng.standard_normal(4)
    rf.checkpoint.save(tmp_path / "a", {"v": wider, "w": w_new}, step=4)
    rf.checkpoint.save(tmp_path / "b", {"v": np.ones((5, 2), np.float32),
                                        "w": w_new})
    with rf.Session(g) as s:
        s.run(init)
        np.testing.assert_array_equal(s.run(v), np.zeros((2, 3)))
        with pytest.raises(rf.errors.InvalidArgumentError,
                           match=r"'v'.*\(5, 2\).*\(None, 3\)"):
            rf.checkpoint.restore_variables(s, tmp_path / "b")
        np.testing.assert_array_equal(s.run(w), np.ones(4))
        assert rf.checkpoint.restore_variables(s, tmp_path / "a") == 4
        np.testing.assert_array_equal(s.run(v), wider)
        np.testing.assert_array_equal(s.run(w), w_new)
