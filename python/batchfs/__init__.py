"""batchfs — mount a batchfs pipeline from Python and read its batches.

    import batchfs
    with batchfs.mount("train.bfs", "/mnt/train", batch=256, size=224) as mnt:
        ds = batchfs.Batches(mnt, rank=0, world=1, format="torch")
        for batch in ds:                      # every epoch; ds.state_dict() resumes
            images, labels = batch["images"], batch["labels"]
        print(batchfs.stats(mnt)["images_per_s"])

- mount(source, path, **options): the daemon for the life of a `with` block
  (MountError carries the daemon's own message); a missing mount point is created and
  removed after; find_binary() says which daemon runs;
- Batches(mnt, epoch, rank, world, format="numpy"|"torch"): a map-style dataset of one
  epoch's batches (torch DataLoader with batch_size=None) and an iterator over epochs
  with state_dict()/load_state_dict(); numpy arrays suit JAX (jax.device_put);
- load_file(path, format): the tensors of one batch file, without a copy (mmap);
- texts(batch, name): the rows of a text field of a multi-field batch as str;
- stats(mnt): MNT/stats as a dict;
- batchfs.gpu: the binding of libbatchfs-gpu (gpu/python/batchfs_gpu.py), loaded on
  first use.

Python 3.9+ with numpy; torch only for format="torch". `pip install ./python` (from a
checkout) builds the programs batchfs and mkbatchfs into the package.
"""
from __future__ import annotations

import importlib
from typing import Any

from ._batches import Batches, batch_count, epoch_count, texts
from ._mount import Mount, MountError, find_binary, format_options, mount, stats
from ._safetensors import (Header, SafetensorsError, TensorInfo, load_file,
                           load_file_with_metadata, read_header)

__version__ = "0.1.0"

__all__ = ["mount", "Mount", "MountError", "format_options", "find_binary", "stats",
           "Batches", "epoch_count", "batch_count", "texts", "load_file",
           "load_file_with_metadata", "read_header", "Header", "TensorInfo", "SafetensorsError", "gpu"]


def __getattr__(name: str) -> Any:
    if name == "gpu":  # imported on first use: it is ctypes over libbatchfs-gpu
        return importlib.import_module(".gpu", __name__)
    raise AttributeError(f"module 'batchfs' has no attribute {name!r}")
