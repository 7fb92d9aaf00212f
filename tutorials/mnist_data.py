"""Find or make an MNIST root folder that ``torchvision.datasets.MNIST(root, download=False)`` loads.

Used by the PyTorch tutorial and the tests. Three sources, chosen by ``data_root``:

- a folder that already holds ``MNIST/raw`` with the four uncompressed idx files (for example the offline
  subset in ``../shared/data``): used as it is;
- any other folder (for example an empty one): the full data set is downloaded there with torchvision, by the
  first rank of the communicator only;
- ``None``: the small slice bundled in ``tutorials/data/MNIST/raw`` (gzip-compressed, see
  ``tutorials/data/README.md``) is decompressed once per node into a cache folder, ``$PROPULATE_DATA_CACHE``
  or a folder in the system's temporary directory.

Every rank of the communicator calls :func:`prepare_mnist`; it returns when the data is in place everywhere.
"""

from __future__ import annotations

import gzip
import os
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

from mpi4py import MPI

# torchvision's names of the uncompressed idx files in <root>/MNIST/raw.
MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
BUNDLED_RAW = Path(__file__).resolve().parent / "data" / "MNIST" / "raw"


def has_mnist(root: str | Path) -> bool:
    """Return whether ``root/MNIST/raw`` holds the four uncompressed idx files."""
    raw = Path(root) / "MNIST" / "raw"
    return all((raw / name).is_file() for name in MNIST_FILES)


def cache_root() -> Path:
    """Return the folder the bundled slice is decompressed into (``$PROPULATE_DATA_CACHE`` if set)."""
    base = os.environ.get("PROPULATE_DATA_CACHE")
    if base:
        return Path(base) / "mnist-slice"
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"propulate-{user}" / "mnist-slice"


def idx_size(compressed: Path) -> int:
    """Return the size in bytes of the idx file inside ``compressed``, read from its header alone."""
    with gzip.open(compressed, "rb") as stream:
        (magic,) = struct.unpack(">I", stream.read(4))
        ndim = magic & 0xFF
        dims = struct.unpack(f">{ndim}I", stream.read(4 * ndim))
    size = 1
    for dim in dims:
        size *= dim
    return 4 + 4 * ndim + size


def extract_bundled(root: Path) -> None:
    """Decompress the bundled slice into ``root/MNIST/raw``; files already complete are kept.

    Each file is written under a temporary name and renamed, so a reader (or a second writer on a shared
    file system) never sees a partial file.

    Raises
    ------
    FileNotFoundError
        If the bundled slice is missing from ``tutorials/data/MNIST/raw``.
    """
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for name in MNIST_FILES:
        source, target = BUNDLED_RAW / f"{name}.gz", raw / name
        if not source.is_file():
            raise FileNotFoundError(f"the bundled MNIST slice is incomplete: {source} is missing")
        if target.is_file() and target.stat().st_size == idx_size(source):
            continue
        with tempfile.NamedTemporaryFile(dir=raw, prefix=f".{name}.", delete=False) as partial:
            with gzip.open(source, "rb") as stream:
                partial.write(stream.read())
        os.chmod(partial.name, 0o644)
        os.replace(partial.name, target)


def run_on_one_rank(comm: MPI.Comm, task: Callable[..., object], *args: object) -> None:
    """Run ``task(*args)`` on the first rank of ``comm``; every rank raises if it failed there."""
    error = None
    if comm.Get_rank() == 0:
        try:
            task(*args)
        except Exception as err:
            error = f"on {MPI.Get_processor_name()}: {type(err).__name__}: {err}"
    error = comm.bcast(error, root=0)
    if error is not None:
        raise RuntimeError(f"preparing MNIST failed {error}")


def download(root: Path) -> None:
    """Download the full MNIST data set into ``root`` with torchvision."""
    import torchvision

    root.mkdir(parents=True, exist_ok=True)
    torchvision.datasets.MNIST(str(root), train=True, download=True)


def prepare_mnist(data_root: str | None, comm: MPI.Intracomm = MPI.COMM_WORLD) -> str:
    """Return a root folder that ``torchvision.datasets.MNIST(root, download=False)`` loads.

    Collective over ``comm``.

    Parameters
    ----------
    data_root : str or None
        A folder holding ``MNIST/raw`` (used as is), any other folder (MNIST is downloaded there by the first
        rank of ``comm``), or ``None`` for the bundled slice, decompressed once per node into
        :func:`cache_root`.
    comm : MPI.Intracomm
        The ranks that will load the data; default ``MPI.COMM_WORLD``.

    Returns
    -------
    str
        The root folder, the same on every rank of a node.

    Raises
    ------
    RuntimeError
        On every rank, if the download (e.g. without internet access) or the decompression failed.
    """
    if data_root is not None:
        if not has_mnist(data_root):
            run_on_one_rank(comm, download, Path(data_root))
        return str(data_root)
    root = cache_root()
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        run_on_one_rank(node, extract_bundled, root)
    finally:
        node.Free()
    return str(root)
