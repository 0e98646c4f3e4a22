#!/usr/bin/env bash
# tests/cli/boxes_ref.sh — boxes follow the crop: bfs_augment_boxes (engine/augment.c)
# against the numpy reference tests/boxes_ref.py over hundreds of random crops (train,
# eval and none; square and non-square outputs; images of 16..3000 px), with boxes inside,
# straddling and outside the crop, inverted, degenerate, tiny (min_area) and not finite.
# The kept rows and their source indices must be equal, bit for bit in f32.
. "$(dirname "$0")/lib.sh" boxes_ref
source tests/pyenv.sh
TOOL=$BUILD/tests/engine_tool
[ -x "$TOOL" ] || fail "$TOOL is missing; run 'make all-tests' first"

for opts in "augment=train" "augment=train,size=160x96,scale=0.3:1,flip=0.5" "augment=eval" \
    "augment=eval,size=128x200" "augment=none,size=64"; do
    "$PY" - "$TOOL" "$opts" <<'PYEOF' || fail "boxes differ from the numpy reference ($opts)"
import subprocess, sys
import numpy as np
sys.path.insert(0, "tests")
from boxes_ref import transform

tool, opts = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(31)
cases, lines = [], []
for c in range(300):
    W, H = (int(v) for v in rng.integers(16, 3000, 2))
    n = int(rng.integers(0, 12))
    x = rng.uniform(-0.2 * W, 1.2 * W, (n, 2))
    y = rng.uniform(-0.2 * H, 1.2 * H, (n, 2))
    b = np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], axis=1).astype(np.float32)
    if n > 2:
        b[0] = [W * 0.4, H * 0.4, W * 0.4 + 0.5, H * 0.4 + 0.5]  # tiny: min_area decides
        b[1] = [np.nan, 0, 10, 10] if c % 2 else [0, 0, np.inf, 10]
    sorted_half = b.copy()
    sorted_half[:, [0, 2]] = np.sort(b[:, [0, 2]], axis=1)  # most boxes the right way round
    sorted_half[:, [1, 3]] = np.sort(b[:, [1, 3]], axis=1)
    b = np.where((np.arange(n) % 4 == 3)[:, None], b, sorted_half).astype(np.float32)
    min_area = float(rng.choice([0.0, 1.0, 25.0]))
    cases.append((b, min_area))
    vals = " ".join(repr(float(v)) for v in b.ravel())
    lines.append(f"{W} {H} {c % 5} {c * 7919 % 100003} {min_area} {n} {vals}")
out = subprocess.run([tool, "boxes", "-", opts, "0", "0"], input="\n".join(lines) + "\n",
                     capture_output=True, text=True, check=True).stdout.splitlines()
assert len(out) == 2 * len(cases), (len(out), len(cases))
kept_total = dropped = 0
for c, (b, min_area) in enumerate(cases):
    g = out[2 * c].split()
    geom = {"flip": int(g[0]), "box": [float(v) for v in g[1:5]], "out": (int(g[5]), int(g[6])),
            "win": tuple(int(v) for v in g[7:11]), "origin": (int(g[11]), int(g[12]))}
    got = out[2 * c + 1].split()
    k = int(got[0])
    rows = np.array([float(v) for v in got[1:]], dtype=np.float64).reshape(k, 5)
    want, idx = transform(b, geom, min_area)
    ok = k == len(idx) and np.array_equal(rows[:, 0].astype(int), idx) and \
        np.array_equal(rows[:, 1:].astype(np.float32), want)
    if not ok:
        print(f"case {c} ({opts}): engine kept {rows.tolist()}, reference {idx.tolist()} {want.tolist()}",
              file=sys.stderr)
        sys.exit(1)
    kept_total += k
    dropped += len(b) - k
    if k:
        w, h = geom["win"][2], geom["win"][3]
        assert (want[:, 0] >= 0).all() and (want[:, 2] <= w).all() and (want[:, 1] >= 0).all() and (want[:, 3] <= h).all()
assert kept_total > 100 and dropped > 50, (kept_total, dropped)  # both paths exercised
print(f"ok - {opts}: {len(cases)} crops, {kept_total} boxes kept, {dropped} dropped, equal to numpy")
PYEOF
done
