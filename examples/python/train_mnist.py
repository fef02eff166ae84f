"""Data-parallel MLP training on Fashion-MNIST with ringflow's Python API.

The model, initialisation, batches and optimizer of `ringflow train`
(tools/train.c, tools/mlp.c), so that with the same seed and settings both
reach the same test accuracy: an MLP 784-512-256-10 (ReLU) replicated on N
virtual CPU devices, each replica taking its rows of every global batch;
the replicas' gradients are averaged by an all-reduce
(ringflow.collectives.all_reduce, "avg") and each device applies Adam
(beta1 0.9, beta2 0.999, epsilon 1e-7) to its copy of the parameters, which
stay bit-identical. The learning rate decays from --lr to 0 over the run
(cosine) unless --schedule constant. Weights start Glorot-uniform from the
seed's splitmix64 stream and biases at zero; every epoch shuffles the
training rows 0..n-1 afresh with the seed's LCG stream, which goes on from
epoch to epoch, as the C trainer does.

    python examples/python/train_mnist.py [--devices 4] [--epochs 5]
        [--batch 128] [--lr 0.001] [--schedule cosine] [--seed 1]
        [--steps N] [--data /usr/share/datasets/fashion-mnist]

The data is Debian's dataset-fashion-mnist (the IDX files, gzipped).
After each epoch it prints the test accuracy and whether the replicas'
parameters are identical.
"""

import argparse
import gzip
import math
import os
import sys
import time
from typing import Dict, List, Optional, Sequence

import numpy as np

import ringflow as rf
from ringflow import collectives

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
SIZES = (784, 512, 256, 10)
BETA1, BETA2, EPSILON = 0.9, 0.999, 1e-7
MASK = (1 << 64) - 1


def read_idx(path: str) -> np.ndarray:
    """An IDX file (gzipped or not) as an array of its unsigned bytes."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if raw[:3] != b"\0\0\x08":
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    rank = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big")
            for i in range(rank)]
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * rank)
    return data.reshape(dims)


def load_split(data_dir: str, split: str):
    """(images (n, 784) float32 in [0, 1], labels (n,) int32)."""
    images = read_idx(os.path.join(data_dir,
                                   f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir,
                                   f"{split}-labels-idx1-ubyte.gz"))
    x = images.reshape(len(images), -1).astype(np.float32) / np.float32(255)
    return x, labels.astype(np.int32)


def initial_values(seed: int) -> List[np.ndarray]:
    """The C trainer's parameters at step 0 (mlp_initial_values): one
    splitmix64 stream from `seed` over W0, b0, W1, b1, ... in row-major
    order; W uniform in +-sqrt(6 / (fan_in + fan_out)), b zero (drawing
    and dropping its numbers)."""
    values, drawn = [], 0
    golden = np.uint64(0x9E3779B97F4A7C15)
    for layer in range(len(SIZES) - 1):
        for shape in ((SIZES[layer], SIZES[layer + 1]), (SIZES[layer + 1],)):
            n = math.prod(shape)
            if len(shape) == 1:  # a bias: zeros, its numbers skipped
                values.append(np.zeros(shape, np.float32))
                drawn += n
                continue
            count = np.arange(drawn + 1, drawn + n + 1, dtype=np.uint64)
            with np.errstate(over="ignore"):
                z = np.uint64(seed) + count * golden
                z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
            u = (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
            limit = math.sqrt(6.0 / (SIZES[layer] + SIZES[layer + 1]))
            values.append(((2 * u - 1) * limit).astype(np.float32)
                          .reshape(shape))
            drawn += n
    return values


def shuffle(idx: List[int], state: int) -> int:
    """Fisher-Yates with the C trainer's LCG; returns the new state."""
    for i in range(len(idx) - 1, 0, -1):
        state = (state * 6364136223846793005 + 1442695040888963407) & MASK
        j = (state >> 33) % (i + 1)
        idx[i], idx[j] = idx[j], idx[i]
    return state


class Model:
    """The replicas, their all-reduced gradients and Adam updates."""

    def __init__(self, devices: int, device_batch: int, seed: int) -> None:
        init = initial_values(seed)
        self.x, self.y, self.lr, self.b1, self.b2 = [], [], [], [], []
        self.loss, self.correct, self.params = [], [], []
        grads = []
        for d in range(devices):
            with rf.device(f"cpu:{d}"):
                x = rf.placeholder(rf.float32, (device_batch, SIZES[0]))
                y = rf.placeholder(rf.int32, (device_batch,))
                params = [rf.Variable(v, name=f"{'bW'[p % 2 == 0]}"
                                      f"{p // 2}_dev{d}")
                          for p, v in enumerate(init)]
                h = x
                for layer in range(len(SIZES) - 1):
                    h = rf.bias_add(rf.matmul(h, params[2 * layer]),
                                    params[2 * layer + 1])
                    if layer + 2 < len(SIZES):
                        h = rf.relu(h)
                xent = rf.sparse_softmax_cross_entropy_with_logits(
                    labels=y, logits=h)
                loss = rf.reduce_mean(xent)
                right = rf.equal(rf.argmax(h, 1), rf.cast(y, rf.int64))
                self.correct.append(rf.cast(right, rf.int32))
                for ph in (self.lr, self.b1, self.b2):
                    ph.append(rf.placeholder(rf.float32, ()))
                grads.append(rf.gradients(loss, params))
            self.x.append(x)
            self.y.append(y)
            self.loss.append(loss)
            self.params.append(params)
        updates = []
        for p in range(len(init)):
            avg = collectives.all_reduce([g[p] for g in grads], "avg",
                                         name=f"grad_sync_{p}")
            for d in range(devices):
                with rf.device(f"cpu:{d}"):
                    m = rf.Variable(np.zeros_like(init[p]))
                    v = rf.Variable(np.zeros_like(init[p]))
                    updates.append(rf.apply_adam(
                        self.params[d][p], m, v, self.b1[d], self.b2[d],
                        self.lr[d], BETA1, BETA2, EPSILON, avg[d]))
        self.train_op = rf.group(*updates, name="train")
        self.init_op = rf.global_variables_initializer()


def scheduled_lr(lr: float, constant: bool, step: int, total: int) -> float:
    """The C trainer's cosine decay from lr to 0 (or lr throughout)."""
    if constant or total <= 1:
        return lr
    return lr * 0.5 * (1.0 + math.cos(math.pi * step / total))


def evaluate(sess: rf.Session, model: Model, x: np.ndarray, y: np.ndarray,
             device_batch: int) -> float:
    """Test accuracy, data-parallel; the last batch padded with row 0."""
    devices = len(model.x)
    per_step = devices * device_batch
    run = sess.make_callable(model.correct, model.x + model.y)
    right = 0
    for start in range(0, len(x), per_step):
        valid = min(per_step, len(x) - start)
        rows = np.zeros(per_step, np.int64)
        rows[:valid] = np.arange(start, start + valid)
        parts = rows.reshape(devices, device_batch)
        got = run(*[x[r] for r in parts], *[y[r] for r in parts])
        right += int(np.concatenate(got)[:valid].sum())
    return right / len(x)


def replicas_spread(sess: rf.Session, model: Model) -> float:
    """The largest difference between the replicas' parameters."""
    values = sess.run(model.params)
    return max(float(np.max(np.abs(values[d][p] - values[0][p])))
               for d in range(len(values)) for p in range(len(values[0])))


def train(devices: int = 4, epochs: int = 5, batch: int = 128,
          lr: float = 1e-3, schedule: str = "cosine", seed: int = 1,
          steps: Optional[int] = None, data: str = DEFAULT_DATA,
          quiet: bool = False) -> Dict[str, object]:
    """Trains as `ringflow train` with these options would; returns
    {"losses": [per step], "accuracy": [per epoch], "spread": [...]}."""
    if batch % devices:
        raise ValueError(f"--batch {batch} is not divisible by {devices} "
                         "devices")
    device_batch = batch // devices
    train_x, train_y = load_split(data, "train")
    test_x, test_y = load_split(data, "t10k")
    graph = rf.Graph()
    with graph.as_default():
        model = Model(devices, device_batch, seed)
    out: Dict[str, object] = {"losses": [], "accuracy": [], "spread": []}
    say = (lambda *a: None) if quiet else print
    say(f"train_mnist: MLP 784-512-256-10 on {devices} devices "
        f"(cpu:0-{devices - 1}), all-reduce, global batch {batch}, "
        f"{epochs} epochs")
    with rf.Session(graph, cpu_devices=devices) as sess:
        sess.run(model.init_op)
        step_fn = sess.make_callable(
            [model.loss, model.train_op],
            model.x + model.y + model.lr + model.b1 + model.b2)
        state = (seed * 2654435761 + 1) & MASK
        per_epoch = len(train_x) // batch
        total = per_epoch * epochs
        if steps and steps < total:
            total = steps
        done = 0
        for epoch in range(1, epochs + 1):
            if done >= total:
                break
            start = time.monotonic()
            idx = list(range(len(train_x)))
            state = shuffle(idx, state)
            order = np.array(idx, np.int64)
            for s in range(per_epoch):
                if done >= total:
                    break
                rows = order[s * batch:(s + 1) * batch].reshape(
                    devices, device_batch)
                done += 1
                scalars = [np.float32(scheduled_lr(
                    lr, schedule == "constant", done - 1, total))]
                scalars += [np.float32(BETA1 ** done),
                            np.float32(BETA2 ** done)]
                losses, _ = step_fn(
                    *[train_x[r] for r in rows], *[train_y[r] for r in rows],
                    *[v for v in scalars for _ in range(devices)])
                out["losses"].append(float(np.mean([float(v)
                                                    for v in losses])))
            acc = evaluate(sess, model, test_x, test_y, device_batch)
            spread = replicas_spread(sess, model)
            out["accuracy"].append(acc)
            out["spread"].append(spread)
            say(f"epoch {epoch}: test accuracy {100 * acc:.2f}%, replicas "
                f"{'bit-identical' if spread == 0 else 'DIFFER'} (max "
                f"parameter difference {spread:.3g}), loss "
                f"{out['losses'][-1]:.4f}, {time.monotonic() - start:.1f} s")
    return out


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--schedule", choices=("cosine", "constant"),
                    default="cosine")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    train(a.devices, a.epochs, a.batch, a.lr, a.schedule, a.seed, a.steps,
          a.data, a.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
