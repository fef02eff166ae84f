#!/usr/bin/env python3
"""Writes the structured seeds of fuzz/corpus/graph_json/ named big_*.json:
every collective op (AllReduce, AllGather, ReduceScatter, Reduce, Broadcast)
on 2 and 4 devices with big and odd dims (2^31, 2^40, 2^61, 2^62, 0, -1),
the overflowing shapes of tests/test_shape_overflow.c (all-gather of two
2^62-row inputs, broadcasting math, MatMul, Reshape), and the lowered forms
(_ReduceSend/_ReduceRecv, _BroadcastSend/_BroadcastRecv) that `ringflow
lower` writes through RF_DUMP_GRAPH_DIR. libFuzzer mutates the digits of
these dims (and the dictionary's big numbers) into shapes a file of small
dims never reaches.

    python3 fuzz/graph_json_seeds.py [RINGFLOW]   # RINGFLOW: for lowered seeds
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "graph_json")
P31, P40, P61, P62 = 2**31, 2**40, 2**61, 2**62


def attr(kind, value):
    return {"type": kind, "value": value}


def ph(name, dev, shape, dtype="float32"):
    return {"name": name, "op": "Placeholder", "device": dev,
            "attrs": {"dtype": attr("type", dtype),
                      "shape": attr("shape", shape)}}


def participant(op, name, dev, x, n, shared, reduction=None):
    attrs = {"T": attr("type", "float32"), "num_devices": attr("int", n),
             "shared_name": attr("string", shared)}
    if reduction:
        attrs["reduction"] = attr("string", reduction)
    return {"name": name, "op": op, "device": dev, "inputs": [x + ":0"],
            "attrs": attrs}


def graph(nodes):
    return {"format": "ringflow-graph", "version": 1, "nodes": nodes}


def collective_seeds():
    shapes = {"2p40x2": [P40, 2], "2p62": [P62], "2p31x2p31": [P31, P31],
              "2p61": [P61], "0x2p62": [0, P62], "3xq": [3, -1]}
    for n in (2, 4):
        devs = ["cpu:%d" % d for d in range(n)]
        for tag, shape in shapes.items():
            xs = [ph("x%d" % d, devs[d], shape) for d in range(n)]
            for op, red in (("AllReduce", "sum"), ("AllGather", None),
                            ("ReduceScatter", "max")):
                nodes = xs + [participant(op, "c%d" % d, devs[d], "x%d" % d,
                                          n, "c", red) for d in range(n)]
                yield "big_%s_%dd_%s" % (op, n, tag), graph(nodes)
            red = {"name": "r", "op": "Reduce", "device": devs[-1],
                   "inputs": [["x%d" % d for d in range(n)]],
                   "attrs": {"T": attr("type", "float32"),
                             "num_devices": attr("int", n),
                             "reduction": attr("string", "sum")}}
            bc = {"name": "b", "op": "Broadcast", "device": devs[-1],
                  "inputs": ["r:0"],
                  "attrs": {"T": attr("type", "float32"),
                            "shape": attr("shape", shape)}}
            use = [{"name": "u%d" % d, "op": "Identity", "device": devs[d],
                    "inputs": ["b:0"]} for d in range(n)]
            yield "big_ReduceBroadcast_%dd_%s" % (n, tag), graph(
                xs + [red, bc] + use)


def overflow_seeds():
    """The hand-written files of tests/test_shape_overflow.c (refused)."""
    yield "big_overflow_allgather", graph(
        [ph("a", "cpu:0", [P62]), ph("b", "cpu:1", [P62]),
         {"name": "g0", "op": "AllGather", "device": "cpu:0",
          "inputs": ["a"], "attrs": {"num_devices": attr("int", 2),
                                     "shared_name": attr("string", "g")}}])
    for op, a, b in (("Add", [P62, 1], [1, 4]), ("MatMul", [P62, 1], [1, 4]),
                     ("BiasAdd", [P62, -1], [4])):
        yield "big_overflow_%s" % op, graph(
            [ph("a", "", a), ph("b", "", b),
             {"name": "s", "op": op, "inputs": ["a", "b"]}])
    yield "big_overflow_AddN", graph(
        [ph("a", "", [P62, -1]), ph("b", "", [-1, 4]),
         {"name": "s", "op": "AddN", "inputs": [["a", "b"]]}])
    yield "big_overflow_Reshape", graph(
        [ph("x", "", [-1]),
         {"name": "k", "op": "Const",
          "attrs": {"dtype": attr("type", "int64"),
                    "value": attr("tensor", {"dtype": "int64", "shape": [2],
                                             "data": "AAAAAAAAAEAEAAAAAAAAAA=="})}},
         {"name": "r", "op": "Reshape", "inputs": ["x", "k"],
          "attrs": {"Tshape": attr("type", "int64")}}])
    yield "big_overflow_Variable", graph(
        [{"name": "v", "op": "Variable",
          "attrs": {"dtype": attr("type", "float32"),
                    "shape": attr("shape", [P62, -1, 2])}}])


def write(name, g):
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(g, f, separators=(",", ":"))
        f.write("\n")


def lowered(ringflow, name, g):
    """The graph after collective lowering on 4 devices, or None."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "g.json")
        with open(src, "w") as f:
            json.dump(g, f)
        env = dict(os.environ, RF_DUMP_GRAPH_DIR=os.path.join(d, "dump"))
        r = subprocess.run([ringflow, "lower", "--devices", "4", src],
                           env=env, capture_output=True)
        path = os.path.join(d, "dump", "000001_03_post_placement_after.json")
        if r.returncode != 0 or not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)


def main():
    ringflow = sys.argv[1] if len(sys.argv) > 1 else None
    for name, g in collective_seeds():
        write(name, g)
        if ringflow and "_4d_" in name and ("2p62" in name or "3xq" in name):
            low = lowered(ringflow, name, g)
            if low:
                write(name.replace("big_", "big_lowered_"), low)
    for name, g in overflow_seeds():
        write(name, g)


if __name__ == "__main__":
    main()
