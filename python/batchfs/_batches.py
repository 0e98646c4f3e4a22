"""batchfs.Batches: the batches of a mount as a map-style dataset and a resumable iterator."""
from __future__ import annotations

import operator
import os
import re
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from ._safetensors import load_file

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
    rank + 2 world, ... of each epoch, the same number for every rank (the last
    n % world batches of an epoch are left out).

    Map-style dataset over one epoch (`epoch`; set_epoch() changes it)::

        DataLoader(Batches(mnt, epoch, rank, world, format="torch"), batch_size=None)

    len() is this rank's batch count, ds[i] this rank's i-th batch as a dict
    {"images", "labels", "indices"} of numpy arrays (format="numpy") or torch tensors
    (format="torch"), views of a private mapping of the batch file (no copy). Batches of
    multi-field datasets hold a tensor per field served besides (b["caption"],
    b["caption_lengths"]; texts(b, "caption") decodes the rows; docs/multimodal.md).

    Iterator over epochs, resumable::

        ds = Batches(mnt, rank=r, world=w)       # from epoch 0 to the mount's last
        ds.load_state_dict(checkpoint["data"])   # optional: resume
        for batch in ds:
            ...
            checkpoint["data"] = ds.state_dict() # {"epoch": E, "batch": K}: next to read

    Iteration starts at the state (epoch, batch), goes through the rest of that epoch
    and the epochs after it up to `epochs` (exclusive; default: the epochs the mount
    lists), and advances the state before each batch is yielded, so a state_dict()
    taken in the loop body resumes right after the batch in hand. Batches are pure
    functions of (epoch, batch), so a resumed run sees exactly the batches a run without
    the stop would have seen.
    """

    def __init__(self, mnt: PathLike, epoch: int = 0, rank: int = 0, world: int = 1, *,
                 epochs: Optional[int] = None, format: str = "numpy") -> None:
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"rank={rank} world={world}: need 0 <= rank < world")
        if epoch < 0:
            raise ValueError(f"epoch={epoch}: must be >= 0")
        if format not in ("numpy", "torch"):
            raise ValueError(f"format={format!r}: must be 'numpy' or 'torch'")
        self.mnt = os.fspath(mnt)
        self.rank, self.world, self.format = rank, world, format
        self._epochs = epochs
        self._counts: Dict[int, int] = {}
        self.epoch = epoch
        self._next = rank  # batch K to read next in self.epoch

    # ---- one epoch: the map-style dataset ----------------------------------------------

    def _batches_in(self, epoch: int) -> int:
        """All ranks' batch count of `epoch`, cut to a multiple of world."""
        if epoch not in self._counts:
            n = batch_count(self.mnt, epoch)
            self._counts[epoch] = n - n % self.world
        return self._counts[epoch]

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
        self.epoch, self._next = epoch, self.rank

    def __len__(self) -> int:
        return self._batches_in(self.epoch) // self.world

    def path(self, epoch: int, batch: int) -> str:
        """The file of batch `batch` (all ranks' numbering) of epoch `epoch`."""
        return os.path.join(self.mnt, "epoch", str(epoch), f"batch_{batch}")

    def __getitem__(self, i: int) -> Dict[str, Any]:
        n = len(self)
        i = operator.index(i)  # an int, numpy integer or 0-d tensor
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"batch {i} of rank {self.rank}: epoch {self.epoch} has {n}")
        return load_file(self.path(self.epoch, self.rank + i * self.world), self.format)

    # ---- the resumable iterator --------------------------------------------------------

    def state_dict(self) -> Dict[str, int]:
        """{"epoch": E, "batch": K}: the next batch iteration reads is batch K of epoch
        E (K in the numbering of all ranks, the K of MNT/epoch/E/batch_K)."""
        n = self._counts.get(self.epoch)
        if n is not None and self._next >= n:  # the epoch is done: the next one's first
            return {"epoch": self.epoch + 1, "batch": self.rank}
        return {"epoch": self.epoch, "batch": self._next}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Resume at state["epoch"], state["batch"]: at that batch when it is this
        rank's, else at this rank's next one after it (a state saved with another
        world size)."""
        epoch, batch = int(state["epoch"]), int(state["batch"])
        if epoch < 0 or batch < 0:
            raise ValueError(f"state {dict(state)}: epoch and batch must be >= 0")
        self.epoch = epoch
        self._next = batch + (self.rank - batch) % self.world

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        while self.epoch < self.epochs:
            k = self._next
            if k >= self._batches_in(self.epoch):
                self.epoch, self._next = self.epoch + 1, self.rank
                continue
            self._next = k + self.world
            yield load_file(self.path(self.epoch, k), self.format)

    def positions(self) -> List[Tuple[int, int]]:
        """The (epoch, batch) pairs iteration would read from the current state."""
        out: List[Tuple[int, int]] = []
        e, k = self.epoch, self._next
        while e < self.epochs:
            n = self._batches_in(e)
            out += [(e, j) for j in range(k, n, self.world)]
            e, k = e + 1, self.rank
        return out
