"""batchfs.Batches: the batches of a mount as a map-style dataset and a resumable iterator."""
from __future__ import annotations

import operator
import os
import re
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from ._safetensors import load_file, read_header

__all__ = ["Batches", "epoch_count", "batch_count", "texts"]

PathLike = Union[str, "os.PathLike[str]"]
_BATCH = re.compile(r"batch_(0|[1-9][0-9]*)\Z")


def epoch_count(mnt: PathLike) -> int:
    """How many epoch directories the mount lists (its `epochs` option)."""
    return sum(1 for name in os.listdir(os.path.join(os.fspath(mnt), "epoch"))
               if name.isdigit())


def batch_count(mnt: PathLike, epoch: int) -> int:
    """How many batch files epoch `epoch` of the mount has (all ranks)."""
    names = os.listdir(os.path.join(os.fspath(mnt), "epoch", str(epoch)))
    return sum(1 for name in names if _BATCH.match(name))


def texts(batch: Mapping[str, Any], name: str) -> List[str]:
    """The rows of text field `name` of a batch (a dict of Batches or load_file) as
    str: batch[name] is [B, L] uint8, zero-padded, and batch[name + "_lengths"] the
    bytes of each row (multi-field datasets, docs/multimodal.md). A text cut by
    text_len= was cut at a character boundary, so every row decodes as UTF-8.
    Works on numpy arrays and torch tensors."""
    if name not in batch or name + "_lengths" not in batch:
        raise KeyError(f"{name!r}: the batch has no text field {name!r} (tensors "
                       f"{name!r} and {name + '_lengths'!r}); it has {sorted(batch)}")
    rows, lengths = batch[name], batch[name + "_lengths"]
    if hasattr(rows, "numpy"):  # torch
        rows, lengths = rows.cpu().numpy(), lengths.cpu().numpy()
    return [bytes(rows[i, :int(n)]).decode("utf-8") for i, n in enumerate(lengths)]


class Batches:
    """The batches of a batchfs mount (or a directory laid out like one,
    MNT/epoch/N/batch_K) for rank `rank` of `world`: batches rank, rank + world,
    rank + 2 world, ... of each epoch, the same number for every rank: floor(n / world)
    (the last n % world batches of an epoch are left out), or with pad=True
    ceil(n / world), the missing ones repeating the epoch's first batches.

    Map-style dataset over one epoch (`epoch`; set_epoch() changes it)::

        DataLoader(Batches(mnt, epoch, rank, world, format="torch"), batch_size=None)

    len() is this rank's batch count, ds[i] this rank's i-th batch as a dict
    {"images", "labels", "indices"} of numpy arrays (format="numpy") or torch tensors
    (format="torch"), views of a private mapping of the batch file (no copy). Batches of
    multi-field datasets hold a tensor per field served besides (b["caption"],
    b["caption_lengths"]; texts(b, "caption") decodes the rows; docs/multimodal.md).
    With pad=True each dict has b["padded"] too, uint8 [B]: all ones for a repeated
    batch, else the mount's own `padded` tensor (pad=1 mounts) or zeros, so that an
    evaluation that drops padded samples sees every batch's samples exactly once.

    Iterator over epochs, resumable at any world size::

        ds = Batches(mnt, rank=r, world=w)       # from epoch 0 to the mount's last
        ds.load_state_dict(checkpoint["data"])   # optional: resume, any world size
        for batch in ds:
            ...
            checkpoint["data"] = ds.state_dict() # {"epoch": E, "position": P, ...}

    The global order of an epoch is its batches 0, 1, 2, ... (one unsharded mount);
    step t of every rank reads the global batches [K0 + t*world, K0 + (t+1)*world),
    rank r the r-th of them. The state is the global sample position P of the epoch
    (P = K*B, B the mount's batch= size, K the next global batch), the same on every
    rank, so a state saved by any rank at any world size resumes sample-exact at any
    other. Iteration advances the state before each batch is yielded, so a state_dict()
    taken in the loop body resumes right after the step in hand.
    """

    def __init__(self, mnt: PathLike, epoch: int = 0, rank: int = 0, world: int = 1, *,
                 epochs: Optional[int] = None, format: str = "numpy",
                 pad: bool = False) -> None:
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"rank={rank} world={world}: need 0 <= rank < world")
        if epoch < 0:
            raise ValueError(f"epoch={epoch}: must be >= 0")
        if format not in ("numpy", "torch"):
            raise ValueError(f"format={format!r}: must be 'numpy' or 'torch'")
        self.mnt = os.fspath(mnt)
        self.rank, self.world, self.format, self.pad = rank, world, format, bool(pad)
        self._epochs = epochs
        self._counts: Dict[int, int] = {}
        self._batch_size: Optional[int] = None
        self.epoch = epoch
        self._base = 0  # global batch of this step's rank 0 in self.epoch

    # ---- one epoch: the map-style dataset ----------------------------------------------

    def _batches_in(self, epoch: int) -> int:
        """All ranks' batch count of `epoch` (the mount's)."""
        if epoch not in self._counts:
            self._counts[epoch] = batch_count(self.mnt, epoch)
        return self._counts[epoch]

    def _steps_end(self, epoch: int) -> int:
        """The first global batch no step of `epoch` starts at or after: steps start at
        base < end. Without pad a step needs `world` batches of the epoch."""
        n = self._batches_in(epoch)
        return n if self.pad else n - self.world + 1

    @property
    def batch_size(self) -> int:
        """B, the mount's batch= (its `pipeline` file), else the rows of batch 0's
        `indices`: the samples per global batch that state positions count."""
        if self._batch_size is None:
            try:
                with open(os.path.join(self.mnt, "pipeline"), encoding="utf-8") as f:
                    for line in f:
                        key, _, value = line.partition("=")
                        if key.strip() == "batch":
                            self._batch_size = int(value.split("#")[0])
                            break
            except (OSError, ValueError):
                pass
            if self._batch_size is None:
                header = read_header(self.path(self.epoch, 0))
                shapes = {t.name: t.shape for t in header.tensors}
                self._batch_size = int(shapes["indices"][0]) if "indices" in shapes else 1
        return self._batch_size

    @property
    def epochs(self) -> int:
        """The end of iteration (exclusive): `epochs`, else the epochs the mount lists."""
        if self._epochs is None:
            self._epochs = epoch_count(self.mnt)
        return self._epochs

    def set_epoch(self, epoch: int) -> None:
        """Make `epoch` the current epoch, from its first batch (as a sampler's set_epoch)."""
        if epoch < 0:
            raise ValueError(f"epoch={epoch}: must be >= 0")
        self.epoch, self._base = epoch, 0

    def __len__(self) -> int:
        n = self._batches_in(self.epoch)
        return -(-n // self.world) if self.pad else n // self.world

    def path(self, epoch: int, batch: int) -> str:
        """The file of batch `batch` (all ranks' numbering) of epoch `epoch`."""
        return os.path.join(self.mnt, "epoch", str(epoch), f"batch_{batch}")

    def _load(self, epoch: int, k: int) -> Dict[str, Any]:
        """Global batch k of epoch (k >= n: batch (k - n) % n, a repeat, with pad)."""
        n = self._batches_in(epoch)
        repeat = k >= n
        b = load_file(self.path(epoch, (k - n) % n if repeat else k), self.format)
        if self.pad:
            rows = len(b["indices"]) if "indices" in b else 1
            if repeat or "padded" not in b:
                import numpy as np
                mark = np.full(rows, 1 if repeat else 0, dtype=np.uint8)
                if self.format == "torch":
                    import torch
                    mark = torch.from_numpy(mark)
                b["padded"] = mark
        return b

    def __getitem__(self, i: int) -> Dict[str, Any]:
        n = len(self)
        i = operator.index(i)  # an int, numpy integer or 0-d tensor
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"batch {i} of rank {self.rank}: epoch {self.epoch} has {n}")
        return self._load(self.epoch, self.rank + i * self.world)

    # ---- the resumable iterator --------------------------------------------------------

    def _settle(self) -> None:
        """Past the epoch's last step: the next epoch's start."""
        while self.epoch < self.epochs and self._base >= self._steps_end(self.epoch):
            self.epoch, self._base = self.epoch + 1, 0

    def state_dict(self) -> Dict[str, int]:
        """{"epoch": E, "position": P, "batch_size": B, "world": W, "batch": K}: the next
        step reads global batches from P/B of epoch E on, P the global sample position
        (the same on every rank; load_state_dict resumes at it at any world size). K is
        this rank's next batch file (epoch/E/batch_K), kept for readers of the old
        {"epoch", "batch"} states."""
        if self.epoch in self._counts:  # the epoch is done: the next one's first
            if self._base >= self._steps_end(self.epoch):
                return {"epoch": self.epoch + 1, "position": 0, "batch_size": self.batch_size,
                        "world": self.world, "batch": self.rank}
        return {"epoch": self.epoch, "position": self._base * self.batch_size,
                "batch_size": self.batch_size, "world": self.world,
                "batch": self._base + self.rank}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Resume at the state's global sample position (state_dict()'s, saved at any world
        size): exact when the position is a multiple of this mount's batch size, which
        it is for every state Batches saves; another position raises ValueError. An old
        state {"epoch": E, "batch": K} resumes at batch K when it is this rank's, else at
        this rank's next one after it."""
        epoch = int(state["epoch"])
        if epoch < 0:
            raise ValueError(f"state {dict(state)}: epoch must be >= 0")
        if "position" in state:
            pos, b = int(state["position"]), self.batch_size
            if pos < 0 or pos % b:
                raise ValueError(
                    f"state {dict(state)}: position {pos} is not a multiple of this mount's "
                    f"batch size {b}, so no batch starts there; resume on a mount whose "
                    f"batch= divides it (a state saved by Batches on a mount of batch="
                    f"{state.get('batch_size', '?')})")
            self.epoch, self._base = epoch, pos // b
            return
        batch = int(state["batch"])
        if batch < 0:
            raise ValueError(f"state {dict(state)}: epoch and batch must be >= 0")
        self.epoch = epoch
        self._base = batch + (self.rank - batch) % self.world - self.rank

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        while True:
            self._settle()
            if self.epoch >= self.epochs:
                return
            k = self._base + self.rank
            self._base += self.world
            yield self._load(self.epoch, k)

    def positions(self) -> List[Tuple[int, int]]:
        """The (epoch, batch) pairs iteration would read from the current state (with
        pad, a repeated batch appears as the batch it repeats)."""
        out: List[Tuple[int, int]] = []
        e, base = self.epoch, self._base
        while e < self.epochs:
            n, end = self._batches_in(e), self._steps_end(e)
            for s in range(base, end, self.world):
                k = s + self.rank
                out.append((e, (k - n) % n if k >= n else k))
            e, base = e + 1, 0
        return out
