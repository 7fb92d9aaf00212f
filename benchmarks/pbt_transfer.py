"""The cost of an exploit in population-based training: seconds and bytes per state copy, disk per member.

An exploit places the donor's committed state in the exploiting interval's folder
(:func:`propulate.pbt.states.transfer`): pin, hard-link every file into a temporary folder, check the source,
rename into place. This builds the network and Adam state of ``tutorials/pbt_example.py`` (``--conv-layers``
convolutions), saves it as the tutorial does, and times ``--copies`` transfers with hard links and as many
with plain copies (the fallback where the file system refuses links), on the folder given (``--folder``; a
parallel file system is where it matters). Printed: the state's size, the median and 90th percentile of a
transfer in milliseconds, the bytes a transfer adds to the disk, and the disk in use per member with
``keep_states`` states (the states kept plus the interval being trained).

Usage, from the repository root (a few seconds; needs the ``torch`` extra)::

    python benchmarks/pbt_transfer.py
    python benchmarks/pbt_transfer.py --conv-layers 6 --folder /scratch/$USER/pbt-bench
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tutorials"))

from torch_ddp_example import build_network

from propulate.pbt import states


def disk_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder``, each inode counted once."""
    seen, total = set(), 0
    for path in folder.rglob("*"):
        info = path.lstat()
        if path.is_file() and info.st_ino not in seen:
            seen.add(info.st_ino)
            total += info.st_blocks * 512
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conv-layers", type=int, default=2)
    parser.add_argument("--copies", type=int, default=50)
    parser.add_argument("--keep-states", type=int, default=3)
    parser.add_argument("--folder", default=None, help="where to copy (default: a temporary folder)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pbt-transfer-", dir=args.folder))
    try:
        model = build_network(args.conv_layers, "relu")
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        model(torch.zeros(2, 1, 28, 28)).sum().backward()
        optimizer.step()  # Adam's moments exist, as in a trained member's state
        source = base / "evaluations" / "1"
        (source / "step-00000004.000001").mkdir(parents=True)
        state = {"epoch": 4, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save(state, source / "step-00000004.000001" / "member_state.pt")
        (source / "interim.json").write_text("[" + ", ".join(['{"loss": 0.5, "metrics": {}}'] * 4) + "]")
        size = (source / "step-00000004.000001" / "member_state.pt").stat().st_size
        params = sum(p.numel() for p in model.parameters())
        print(f"state of {params:,} parameters with Adam's moments: {size:,} bytes")
        for label, patch in (
            ("hard links", None),
            ("copies", mock.patch.object(os, "link", side_effect=OSError)),
        ):
            seconds, added = [], []
            for k in range(args.copies):
                target = base / "evaluations" / f"{label[0]}{k}"
                target.mkdir()
                before = disk_bytes(base)
                start = time.perf_counter()
                if patch is None:
                    states.transfer(source, target, str(k))
                else:
                    with patch:
                        states.transfer(source, target, str(k))
                seconds.append(time.perf_counter() - start)
                added.append(disk_bytes(base) - before)
                shutil.rmtree(target)
            ms = np.array(seconds) * 1e3
            print(
                f"{label:>10}: {np.median(ms):.2f} ms median, {np.percentile(ms, 90):.2f} ms 90th "
                f"percentile, {int(np.median(added)):,} bytes added to the disk per transfer"
            )
        print(
            f"disk per member with keep_states={args.keep_states}: at most {args.keep_states + 1} states, "
            f"{(args.keep_states + 1) * size:,} bytes (the states kept and the interval being trained)"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
