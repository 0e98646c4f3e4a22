"""tests/bench/peers.py KIND ROOT BATCH WORKERS [DAEMON_PID] — one input pipeline at steady
state, as bench_peers.sh runs it: RandomResizedCrop to 224x224 (scale 0.08..1, ratio
3/4..4/3) and a random horizontal flip of every JPEG, uint8, batches of BATCH, WORKERS
workers or threads; one warm-up epoch (or more: BFS_PEERS_WARMUP_BATCHES, see
WARMUP_BATCHES), then 3 timed epochs of all full batches. Prints one JSON object: the
median images/s of the timed epochs, each epoch's, their spread ((max - min) / median),
CPU seconds per image over them (every process of the pipeline: this one, its workers,
and for batchfs the daemon), the warm-up's epochs, and the first epoch's images/s and
images per CPU second.

KIND:
  dali         NVIDIA DALI without a GPU (device_id=None): fn.readers.file with a full
               reshuffle every epoch, fn.decoders.image_random_crop (region decode),
               fn.resize, fn.flip; ROOT is the ImageFolder
  torchvision  torchvision.io.decode_jpeg + transforms.v2.RandomResizedCrop(antialias) +
               RandomHorizontalFlip in a DataLoader (shuffle, persistent workers,
               torch.set_num_threads(1) in each); ROOT is the ImageFolder
  torchvision-recipe
               torchvision's training recipe with RandAugment and RandomErasing, as
               bench_recipes.sh compares it: decode_jpeg + v2.RandomResizedCrop(antialias)
               + RandomHorizontalFlip + RandAugment(2, 9) + ToDtype(float32, scale) +
               Normalize(ImageNet) + RandomErasing(0.25) in a DataLoader as above;
               float32 batches
  pil          the usual recipe: torchvision.datasets.ImageFolder (PIL decode) +
               transforms.RandomResizedCrop + RandomHorizontalFlip + PILToTensor in a
               DataLoader as above; ROOT is the ImageFolder
  batchfs      a batchfs mount: ROOT is the mount point, DAEMON_PID its daemon; epochs
               0, 1, ... read batch by batch in 1 MiB reads into one reused buffer (the
               first ones the warm-up; epoch 0 is the first epoch of a fresh mount)
  batchfs-mmap the same, each batch mmap'ed instead (zero-copy, as torch.frombuffer
               over a mapping), one byte of each page read
"""
import json
import mmap
import os
import sys
import time


def proc_cpu(pid):
    """utime + stime of pid and of every live descendant, in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    children = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append((int(p), fields))
            except OSError:
                pass
    total, todo = 0.0, [pid]
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    total += (int(fields[11]) + int(fields[12])) / tick
    while todo:
        for child, cf in children.get(todo.pop(), []):
            total += (int(cf[11]) + int(cf[12])) / tick
            todo.append(child)
    return total


# Warm-up: whole epochs until at least BFS_PEERS_WARMUP_BATCHES batches were read (default
# 1: one epoch). A longer warm-up was tried for batchfs's memory to settle (its passed-batch
# bound fills in the first epoch of the bench's 7-batch corpus, and batch files move to
# huge pages after it: docs/engine.md, "Batch memory"): 32 batches (5 epochs), in 2 runs,
# measured no steadier nor faster than one epoch in a run between them (2026-11-30), so
# one epoch it stays. The first
# epoch, a fresh mount's for batchfs, is reported on its own (first_epoch_*).
WARMUP_BATCHES = max(1, int(os.environ.get("BFS_PEERS_WARMUP_BATCHES", "1")))


def run_epochs(one_epoch, pids, batch):
    """one_epoch() -> images; returns a dict: images_per_s (the median of 3 timed epochs
    after the warm-up), cpu_s_per_image (over them), rates (theirs), first (images/s and
    CPU s per image of the first epoch) and warmup_epochs."""
    def timed():
        c0, t0 = sum(proc_cpu(p) for p in pids), time.perf_counter()
        n = one_epoch()
        return n, time.perf_counter() - t0, sum(proc_cpu(p) for p in pids) - c0

    n, dt, cpu = timed()  # workers start, files come into the page cache
    first = (n / dt, cpu / n)
    warm, epochs = n, 1
    while warm < WARMUP_BATCHES * batch:
        warm += timed()[0]
        epochs += 1
    rates, images, cpu = [], 0, 0.0
    for _ in range(3):
        n, dt, c = timed()
        rates.append(n / dt)
        images += n
        cpu += c
    return {"images_per_s": sorted(rates)[1], "cpu_s_per_image": cpu / images, "rates": rates,
            "first": first, "warmup_epochs": epochs}


def files_of(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    out = []
    for label, c in enumerate(classes):
        for dirpath, _, names in sorted(os.walk(os.path.join(root, c))):
            out += [(os.path.join(dirpath, n), label) for n in sorted(names)
                    if n.lower().endswith((".jpg", ".jpeg"))]
    return out


def run_loader(ds, batch, workers, dtype="uint8"):
    """A DataLoader over ds as the PyTorch peers use it: shuffled, persistent workers of
    one thread each, full batches of 3x224x224 tensors (uint8, or float32 for a recipe)."""
    import torch

    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                     drop_last=True, persistent_workers=True,
                                     worker_init_fn=lambda _: torch.set_num_threads(1))
    torch.set_num_threads(1)

    def epoch():
        n = 0
        for x, _ in dl:
            assert x.dtype == getattr(torch, dtype) and tuple(x.shape[1:]) == (3, 224, 224)
            n += x.shape[0]
        return n

    return run_epochs(epoch, [os.getpid()], batch)


def dali(root, batch, workers):
    from nvidia.dali import fn, pipeline_def, types

    n = len(files_of(root))

    @pipeline_def(batch_size=batch, num_threads=workers, device_id=None, seed=1)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=root, shuffle_after_epoch=True,
                                        name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                               random_area=[0.08, 1.0],
                                               random_aspect_ratio=[0.75, 4.0 / 3.0])
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.flip(images, horizontal=fn.random.coin_flip())
        return images, labels

    p = pipe()
    p.build()
    per_epoch = n // batch

    def epoch():
        for _ in range(per_epoch):
            out = p.run()
            assert out[0].as_tensor().shape()[1:] == [224, 224, 3]
        return per_epoch * batch

    return run_epochs(epoch, [os.getpid()], batch)


def jpeg_dataset(files, tf):
    """A Dataset of (tf(torchvision.io.decode_jpeg(file)), label) over files_of's list."""
    import torch
    from torchvision.io import decode_jpeg, ImageReadMode

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            path, label = files[i]
            with open(path, "rb") as f:
                data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
            return tf(decode_jpeg(data, mode=ImageReadMode.RGB)), label

    return DS()


def torchvision_(root, batch, workers):
    from torchvision.transforms import v2

    tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])
    return run_loader(jpeg_dataset(files_of(root), tf), batch, workers)


def torchvision_recipe(root, batch, workers):
    import torch
    from torchvision.transforms import v2

    tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                     v2.RandAugment(num_ops=2, magnitude=9),
                     v2.ToDtype(torch.float32, scale=True),
                     v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
                     v2.RandomErasing(p=0.25)])
    return run_loader(jpeg_dataset(files_of(root), tf), batch, workers, "float32")


def pil(root, batch, workers):
    import torch
    from torchvision import datasets, transforms

    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                             transforms.PILToTensor()])
    return run_loader(datasets.ImageFolder(root, transform=tf), batch, workers)


def batchfs(mnt, daemon, zero_copy):
    nb = len(os.listdir(f"{mnt}/epoch/0"))
    per = int(os.getxattr(f"{mnt}/epoch/0/batch_0", "user.batchfs.samples"))
    e = [0]
    buf = bytearray(os.stat(f"{mnt}/epoch/0/batch_0").st_size)  # reused, as a loader would
    view = memoryview(buf)

    def read_batch(f):
        got = 0
        while got < len(buf):  # the whole batch into the buffer, 1 MiB per read
            n = f.readinto(view[got:got + (1 << 20)])
            if not n:
                break
            got += n

    def map_batch(f):
        # as torch.frombuffer / numpy.frombuffer over mmap: no copy; one byte of every
        # page read, so each page is mapped in (the least a consumer of the tensor costs)
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            with memoryview(m) as mv:
                bytes(mv[::4096])

    def epoch():
        for k in range(nb):
            with open(f"{mnt}/epoch/{e[0]}/batch_{k}", "rb", buffering=0) as f:
                (map_batch if zero_copy else read_batch)(f)
        e[0] += 1
        return nb * per

    return run_epochs(epoch, [os.getpid(), daemon], per)


def main():
    kind, root, batch, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if kind == "dali":
        r = dali(root, batch, workers)
    elif kind == "torchvision":
        r = torchvision_(root, batch, workers)
    elif kind == "torchvision-recipe":
        r = torchvision_recipe(root, batch, workers)
    elif kind == "pil":
        r = pil(root, batch, workers)
    elif kind in ("batchfs", "batchfs-mmap"):
        r = batchfs(root, int(sys.argv[5]), kind == "batchfs-mmap")
    else:
        sys.exit(f"peers.py: unknown kind {kind}")
    ips, cpu, rates = r["images_per_s"], r["cpu_s_per_image"], r["rates"]
    print(json.dumps({"kind": kind, "images_per_s": round(ips, 1),
                      "cpu_s_per_image": cpu, "images_per_cpu_s": round(1 / cpu, 1),
                      "epochs_images_per_s": [round(x) for x in rates],
                      "spread": round((max(rates) - min(rates)) / ips, 3),
                      "warmup_epochs": r["warmup_epochs"],
                      "first_epoch_images_per_s": round(r["first"][0], 1),
                      "first_epoch_images_per_cpu_s": round(1 / r["first"][1], 1)}))


if __name__ == "__main__":
    main()
