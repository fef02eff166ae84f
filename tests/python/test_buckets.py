"""Session(bucket_bytes=..., comm_dtype=...): gradient buckets and the
wire dtype of float32 all-reduces from Python. Independent all-reduces of
computed inputs on 4 CPU devices, against NumPy in float64, fused and
unfused; the rewrite itself through rf.lower; bfloat16 on the wire; the
errors."""

import numpy as np
import pytest

import ringflow as rf
from ringflow import collectives

DEVICES = 4


def build(k, n):
    """k all-reduces of n float32 each over DEVICES devices; each input is
    x + x (a kernel: it writes into its slice of the bucket)."""
    g = rf.Graph()
    feeds, outs = [], []
    with g.as_default():
        for _ in range(k):
            ins = []
            for d in range(DEVICES):
                with rf.device(f"cpu:{d}"):
                    x = rf.placeholder(np.float32, (n,))
                    feeds.append(x)
                    ins.append(x + x)
            outs.append(collectives.all_reduce(ins, "sum"))
    return g, feeds, outs


def all_reduces(graph):
    return len({op.get_attr("shared_name") for op in graph.get_operations()
                if op.type == "AllReduce"})


@pytest.mark.parametrize("bucket_bytes", [0, None, 1 << 20, 4096])
def test_fused_results(bucket_bytes, rng):
    k, n = 5, 300
    g, feeds, outs = build(k, n)
    values = [rng.standard_normal(n).astype(np.float32) for _ in feeds]
    with rf.Session(g, cpu_devices=DEVICES, bucket_bytes=bucket_bytes) as s:
        for _ in range(2):
            got = s.run(outs, dict(zip(feeds, values)))
    for c in range(k):
        want = sum(2 * values[c * DEVICES + d].astype(np.float64)
                   for d in range(DEVICES))
        for d in range(DEVICES):
            np.testing.assert_allclose(got[c][d], want, rtol=1e-6, atol=1e-5)
            # every device holds the same bits
            assert np.array_equal(got[c][d], got[c][0])


def test_rewrite_counts():
    g, _, _ = build(6, 256)  # 1 KiB each
    assert all_reduces(rf.lower(g, cpu_devices=DEVICES, bucket_bytes=0)) == 6
    assert all_reduces(rf.lower(g, cpu_devices=DEVICES,
                                bucket_bytes=2048)) == 3
    assert all_reduces(rf.lower(g, cpu_devices=DEVICES)) == 1  # 1 MiB


def test_bfloat16_on_the_wire(rng):
    g, feeds, outs = build(1, 64)
    values = [rng.standard_normal(64).astype(np.float32) for _ in feeds]
    with rf.Session(g, cpu_devices=DEVICES, comm_dtype="bfloat16") as s:
        got = s.run(outs, dict(zip(feeds, values)))[0]
    with rf.Session(g, cpu_devices=DEVICES, comm_dtype="float32") as s:
        exact = s.run(outs, dict(zip(feeds, values)))[0]
    want = sum(2 * v.astype(np.float64) for v in values)
    np.testing.assert_allclose(exact[0], want, rtol=1e-6, atol=1e-5)
    # bfloat16 keeps 8 significant bits: each input and the sum round once
    np.testing.assert_allclose(got[0], want, rtol=0, atol=0.1)
    assert not np.array_equal(got[0], exact[0])
    assert all(np.array_equal(got[d], got[0]) for d in range(DEVICES))


def test_errors():
    g, _, _ = build(1, 8)
    with pytest.raises(rf.errors.InvalidArgumentError, match="comm_dtype"):
        rf.Session(g, cpu_devices=DEVICES, comm_dtype="int8")
    with pytest.raises(rf.errors.InvalidArgumentError, match="bucket"):
        rf.Session(g, cpu_devices=DEVICES, bucket_bytes=-2)  # -1: default
    with pytest.raises(TypeError):
        rf.Session(g, cpu_devices=DEVICES, comm_dtype=16)


def test_default_device_option():
    """default_device places nodes that name no device (it used to raise
    TypeError: a Python bytes object in a char * field)."""
    g = rf.Graph()
    with g.as_default():
        y = rf.identity(np.arange(3, dtype=np.float32))
    with rf.Session(g, cpu_devices=2, default_device="cpu:1") as s:
        np.testing.assert_array_equal(s.run(y), [0, 1, 2])
    lowered = rf.lower(g, cpu_devices=2, default_device="cpu:1")
    assert {op.device for op in lowered.get_operations()} == {"cpu:1"}
    with pytest.raises(TypeError):
        rf.Session(g, cpu_devices=2, default_device=1)


@pytest.mark.parametrize("name,dtype", [("bfloat16", rf.bfloat16),
                                        ("float16", np.float16),
                                        ("float32", rf.float32)])
def test_comm_dtype_as_a_dtype(name, dtype, rng):
    """comm_dtype takes a dtype as every dtype argument does (docs/PYTHON.md
    "Dtypes"), with the results of its name; it used to raise TypeError."""
    g, feeds, outs = build(1, 64)
    values = dict(zip(feeds, [rng.standard_normal(64).astype(np.float32)
                              for _ in feeds]))
    with rf.Session(g, cpu_devices=DEVICES, comm_dtype=name) as s:
        want = s.run(outs, values)[0]
    with rf.Session(g, cpu_devices=DEVICES, comm_dtype=dtype) as s:
        got = s.run(outs, values)[0]
    for d in range(DEVICES):
        assert np.array_equal(got[d], want[d])
    with pytest.raises(rf.errors.InvalidArgumentError, match="comm_dtype"):
        rf.Session(g, cpu_devices=DEVICES, comm_dtype=np.int8)
