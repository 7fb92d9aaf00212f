"""Make the small MNIST slice that ships with the tutorials.

The tutorials and tests must run offline, so the repository carries a slice of the real MNIST data in
torchvision's layout: ``MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz``. This script takes the
first ``--train`` training and the first ``--test`` test images (and their labels) from an uncompressed
MNIST ``raw`` folder, rewrites the idx headers with the new counts and gzips them reproducibly
(compression level 9, no file name, modification time 0), so that running it again yields identical bytes.
It refuses to write more than ``--max-bytes`` in total (the repository's size budget).

Usage, from the repository root::

    python tutorials/data/make_mnist_slice.py --source ../shared/data/MNIST/raw

``tutorials/mnist_data.py`` decompresses the slice into a cache folder that
``torchvision.datasets.MNIST(root, download=False)`` loads.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import struct
from pathlib import Path

# idx magic numbers: 0x00000803 = unsigned bytes, 3 dimensions; 0x00000801 = unsigned bytes, 1 dimension.
IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
# The slice's total size budget in bytes.
MAX_BYTES = 1_900_000


def read_idx(path: Path, magic: int) -> tuple[tuple[int, ...], bytes]:
    """Read an uncompressed idx file of unsigned bytes.

    Parameters
    ----------
    path : Path
        The idx file.
    magic : int
        The expected magic number (``IMAGES_MAGIC`` or ``LABELS_MAGIC``).

    Returns
    -------
    tuple[tuple[int, ...], bytes]
        The dimensions (number of items first) and the item bytes after the header.

    Raises
    ------
    ValueError
        If the header's magic number is not ``magic`` or the body's length does not match the dimensions.
    """
    data = path.read_bytes()
    (found,) = struct.unpack(">I", data[:4])
    if found != magic:
        raise ValueError(f"{path}: idx magic number {found}, expected {magic}")
    ndim = magic & 0xFF
    dims = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    body = data[4 + 4 * ndim :]
    item_size = 1
    for dim in dims[1:]:
        item_size *= dim
    if len(body) != dims[0] * item_size:
        raise ValueError(f"{path}: {len(body)} bytes of data, header says {dims}")
    return dims, body


def slice_idx(path: Path, magic: int, count: int) -> bytes:
    """Return the idx file at ``path`` cut to its first ``count`` items, with a header that says so.

    Raises
    ------
    ValueError
        If the file holds fewer than ``count`` items or is not a valid idx file.
    """
    dims, body = read_idx(path, magic)
    if not 0 < count <= dims[0]:
        raise ValueError(f"{path} holds {dims[0]} items; cannot take {count}")
    item_size = len(body) // dims[0]
    header = struct.pack(f">I{len(dims)}I", magic, count, *dims[1:])
    return header + body[: count * item_size]


def make_slice(
    source: Path, dest: Path, n_train: int, n_test: int, max_bytes: int = MAX_BYTES
) -> dict[str, int]:
    """Write the gzip-compressed slice into ``dest`` and return the size in bytes of each file.

    Raises
    ------
    ValueError
        If a source file is invalid or too short, or if the slice would exceed ``max_bytes`` in total
        (nothing is written then).
    """
    parts = {
        "train-images-idx3-ubyte": (IMAGES_MAGIC, n_train),
        "train-labels-idx1-ubyte": (LABELS_MAGIC, n_train),
        "t10k-images-idx3-ubyte": (IMAGES_MAGIC, n_test),
        "t10k-labels-idx1-ubyte": (LABELS_MAGIC, n_test),
    }
    compressed = {
        f"{name}.gz": gzip.compress(slice_idx(source / name, magic, count), compresslevel=9, mtime=0)
        for name, (magic, count) in parts.items()
    }
    total = sum(len(blob) for blob in compressed.values())
    if total > max_bytes:
        raise ValueError(f"the slice would take {total} bytes, more than max_bytes={max_bytes}")
    dest.mkdir(parents=True, exist_ok=True)
    for name, blob in compressed.items():
        (dest / name).write_bytes(blob)
    return {name: len(blob) for name, blob in compressed.items()}


def main() -> None:
    """Parse the command line, write the slice and print each file's size and md5."""
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source", type=Path, default=Path("../shared/data/MNIST/raw"), help="uncompressed raw folder"
    )
    parser.add_argument("--dest", type=Path, default=here / "MNIST" / "raw", help="output folder")
    parser.add_argument("--train", type=int, default=8000, help="number of training images to keep")
    parser.add_argument("--test", type=int, default=2000, help="number of test (t10k) images to keep")
    parser.add_argument("--max-bytes", type=int, default=MAX_BYTES, help="total size budget in bytes")
    args = parser.parse_args()
    sizes = make_slice(args.source, args.dest, args.train, args.test, args.max_bytes)
    for name, size in sizes.items():
        md5 = hashlib.md5((args.dest / name).read_bytes()).hexdigest()
        print(f"{name:32s} {size:>9d} bytes  md5 {md5}")
    print(f"{'total':32s} {sum(sizes.values()):>9d} bytes")


if __name__ == "__main__":
    main()
