"""tests/bench/read_epochs.py MNT EPOCHS — read epochs 0..EPOCHS-1 of a batchfs mount in
order, batch by batch, in 1 MiB reads, as one reader; print each epoch's images/s on a
line of its own. Used by bench_memory.sh and bench_cold.sh."""
import os
import sys
import time

mnt, epochs = sys.argv[1], int(sys.argv[2])
nb = len(os.listdir(f"{mnt}/epoch/0"))
per = int(os.getxattr(f"{mnt}/epoch/0/batch_0", "user.batchfs.samples"))
for e in range(epochs):
    t0 = time.perf_counter()
    for k in range(nb):
        with open(f"{mnt}/epoch/{e}/batch_{k}", "rb", buffering=0) as f:
            while f.read(1 << 20):
                pass
    print(f"{nb * per / (time.perf_counter() - t0):.0f}")
