#!/usr/bin/env python3
"""Writes the seeds of fuzz/corpus/idx/ and fuzz/corpus/idx_labelled/ other
than the two hand-made ones: valid files plain and gzip, and the hostile
files of issue 20 made small (each under 16 KiB, -max_len): a gzip bomb
(10x28x28 images, then 8 MiB of zeros), dims whose product overflows, huge
dims with little data, data one byte short and one byte long, a cut gzip
stream, a bad CRC, an empty set, ranks 0 and 5, another element type; and
for the labelled harness (2-byte length of the images file, images, labels):
matching sets, a label of 10, counts that differ, ranks swapped.

    python3 fuzz/idx_seeds.py
"""
import gzip
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def idx(dims, data=None, rank=None, kind=0x08):
    n = 1
    for d in dims:
        n *= d
    if data is None:
        data = bytes(i % 251 for i in range(n))
    rank = len(dims) if rank is None else rank
    return bytes([0, 0, kind, rank]) + b"".join(
        struct.pack(">I", d) for d in dims) + data


def gz(b):
    return gzip.compress(b, 9, mtime=0)


def write(corpus, name, b):
    assert len(b) <= 16384, (name, len(b))
    d = os.path.join(HERE, "corpus", corpus)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(b)


def main():
    img = idx([3, 4, 4])
    lab = idx([3], bytes([0, 9, 5]))
    write("idx", "images_3x4x4.gz", gz(img))
    write("idx", "labels_3.gz", gz(lab))
    write("idx", "bomb_10x28x28.gz",
          gz(idx([10, 28, 28]) + bytes(8 << 20)))
    write("idx", "dims_overflow", idx([0xFFFFFFFF] * 4, b""))
    write("idx", "dims_overflow.gz", gz(idx([0xFFFFFFFF] * 4, b"")))
    write("idx", "dims_1GiB_little_data.gz",
          gz(idx([16384, 256, 256], bytes(1 << 16))))
    write("idx", "short_by_one", img[:-1])
    write("idx", "long_by_one.gz", gz(img + b"\x00"))
    cut = gz(img + bytes(4096))
    write("idx", "gzip_cut.gz", cut[: len(cut) // 2])
    bad_crc = bytearray(gz(img))
    bad_crc[-8] ^= 0xFF
    write("idx", "gzip_bad_crc.gz", bytes(bad_crc))
    write("idx", "empty_set.gz", gz(idx([0, 28, 28], b"")))
    write("idx", "rank0", bytes([0, 0, 8, 0]))
    write("idx", "rank5", idx([1, 1, 1, 1, 1], b"\x00"))
    write("idx", "type_int32", idx([2], b"\x00" * 8, kind=0x0C))

    def pair(a, b):
        return struct.pack(">H", len(a)) + a + b

    write("idx_labelled", "match", pair(img, lab))
    write("idx_labelled", "label_10", pair(img, idx([3], bytes([0, 10, 1]))))
    write("idx_labelled", "counts_differ", pair(img, idx([4], bytes(4))))
    write("idx_labelled", "ranks_swapped", pair(lab, img))
    write("idx_labelled", "empty_sets", pair(idx([0, 2, 2], b""), idx([0], b"")))


if __name__ == "__main__":
    main()
