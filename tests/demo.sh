#!/usr/bin/env bash
# tests/demo.sh — `make demo`: the main job end to end on a small generated dataset, as a
# new user would run it: make an ImageFolder, pack it, describe it, mount the pipeline,
# list an epoch, read batches with cat, dd and a 15-line numpy reader, look at /pipeline
# and /stats, read the daemon's log (one image is cut short on purpose: a bad sample,
# substituted and logged), unmount. The mount is always unmounted on exit (trap). Without a usable
# /dev/fuse the demo says so loudly and shows the packing part only.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEMO_DIR=${DEMO_DIR:-$BUILD/demo}
case $DEMO_DIR in /*) ;; *) DEMO_DIR=$PWD/$DEMO_DIR ;; esac
MNT=$DEMO_DIR/mnt
OPTS=batch=32,size=64,epochs=10

cleanup() {
    if mountpoint -q "$MNT" 2>/dev/null; then
        fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT" 2>/dev/null || true
    fi
}
trap cleanup EXIT
cleanup
rm -rf "$DEMO_DIR" && mkdir -p "$DEMO_DIR"
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

echo "== 1. a small ImageFolder: 4 classes x 64 synthetic JPEGs (160..400 px) =="
"$BUILD/tests/gen_imagefolder" "$DEMO_DIR/images" 4 64 160 400 1
echo "   $DEMO_DIR/images: $(ls "$DEMO_DIR/images" | tr '\n' ' ')($(du -sh "$DEMO_DIR/images" | cut -f1))"
cut_short=$DEMO_DIR/images/class_003/img_00063.jpg
head -c 1000 "$cut_short" >"$DEMO_DIR/short.jpg" && mv "$DEMO_DIR/short.jpg" "$cut_short"
echo "   one image cut short on purpose (its first 1000 bytes): $cut_short"

echo "== 2. pack it into one file: mkbatchfs images demo.bfs (lossless restart markers by default: crops decode faster) =="
"$BUILD/mkbatchfs" "$DEMO_DIR/images" "$DEMO_DIR/demo.bfs"

echo "== 3. describe it: mkbatchfs --info demo.bfs =="
"$BUILD/mkbatchfs" --info "$DEMO_DIR/demo.bfs" | sed 's/^/   /'

why=
if [ ! -c /dev/fuse ]; then
    why="/dev/fuse does not exist (load the fuse module; in a container pass --device /dev/fuse)"
elif ! command -v fusermount3 >/dev/null; then
    why="fusermount3 is not installed (Debian package fuse3)"
elif ! { exec 9<>/dev/fuse; } 2>/dev/null; then
    why="/dev/fuse cannot be opened"
fi
{ exec 9>&-; } 2>/dev/null || true
if [ -n "$why" ]; then
    echo
    echo "########################################################################"
    echo "## NO MOUNT ON THIS MACHINE: $why"
    echo "## The demo stops here; batchfs --bench runs the same pipeline without a mount:"
    echo "##   $BUILD/batchfs --bench $DEMO_DIR/demo.bfs -o $OPTS"
    echo "########################################################################"
    exit 0
fi

echo "== 4. mount the pipeline: batchfs demo.bfs mnt -o $OPTS,log=batchfs.log =="
echo "   (in the background the daemon logs to syslog by default; log=FILE appends to a file)"
mkdir -p "$MNT"
"$BUILD/batchfs" "$DEMO_DIR/demo.bfs" "$MNT" -o "$OPTS,log=$DEMO_DIR/batchfs.log"
echo "   \$ ls mnt";                   ls "$MNT" | sed 's/^/     /'
echo "   \$ ls mnt/epoch";             echo "     $(ls -v "$MNT/epoch" | tr '\n' ' ')"
echo "   \$ ls -l mnt/epoch/0";        ls -lv "$MNT/epoch/0" | sed 's/^/     /'
echo "   (no batch is computed to list or stat: sizes come from the plan)"

echo "== 5. batches are files: cat, dd =="
for k in 0 1; do
    t=$(date +%s%N)
    n=$(cat "$MNT/epoch/0/batch_$k" | wc -c)
    echo "   \$ cat mnt/epoch/0/batch_$k    $n bytes in $(ms_since "$t") ms"
done
echo "   \$ dd if=mnt/epoch/3/batch_5 of=/dev/null bs=1M"
dd if="$MNT/epoch/3/batch_5" of=/dev/null bs=1M 2>&1 | tail -n 1 | sed 's/^/     /'
echo "   \$ head -c 8 mnt/epoch/0/batch_0 | od -An -tu8   # safetensors: header length, then JSON"
echo "     $(head -c 8 "$MNT/epoch/0/batch_0" | od -An -tu8 | tr -s ' ')"
echo "   $(head -c 400 "$MNT/epoch/0/batch_0" | tail -c +9 | cut -c1-150)..."

echo "== 6. read them in Python: numpy only =="
cat >"$DEMO_DIR/read_batch.py" <<'EOF'
import json, struct, sys, time
import numpy as np

DTYPES = {"U8": np.uint8, "F16": np.float16, "F32": np.float32, "I64": np.int64}

def read_batch(path):
    buf = open(path, "rb").read()
    n = struct.unpack("<Q", buf[:8])[0]                  # 8-byte header length
    header = json.loads(buf[8:8 + n])                    # JSON: dtype, shape, offsets
    meta = header.pop("__metadata__")
    return {name: np.frombuffer(buf, DTYPES[t["dtype"]], offset=8 + n + t["data_offsets"][0],
                                count=int(np.prod(t["shape"]))).reshape(t["shape"])
            for name, t in header.items()}, meta

mnt, start, n = sys.argv[1], time.time(), 0
for k in range(8):                                       # every batch of epoch 1
    batch, meta = read_batch(f"{mnt}/epoch/1/batch_{k}")
    n += len(batch["labels"])
    if k == 0:
        print("images", batch["images"].shape, batch["images"].dtype, " metadata", meta)
        print("labels", batch["labels"][:16], " indices", batch["indices"][:6], "...")
print(f"{n} images in {time.time() - start:.2f} s: {n / (time.time() - start):.0f} images/s")
EOF
sed 's/^/   | /' "$DEMO_DIR/read_batch.py"
PY=$( (. tests/pyenv.sh >/dev/null 2>&1 && echo "$PY") || true)
if [ -z "$PY" ] && python3 -c "import numpy" 2>/dev/null; then PY=python3; fi
if [ -n "$PY" ]; then
    echo "   \$ python read_batch.py mnt    # epoch 1 was never read: computed as it is read"
    "$PY" "$DEMO_DIR/read_batch.py" "$MNT" | sed 's/^/     /'
else
    echo "   (skipped: no Python with numpy; tests/pyenv.sh could not build its venv)"
fi

echo "== 7. the pipeline: cat mnt/pipeline =="
sed 's/^/   /' "$MNT/pipeline"

echo "== 8. live statistics: cat mnt/stats =="
sed 's/^/   /' "$MNT/stats"

echo "== 9. a bad sample: every batch of epoch 2 read, then the daemon's log =="
for k in $(seq 0 7); do cat "$MNT/epoch/2/batch_$k" >/dev/null; done
echo "   \$ cat batchfs.log"
sed 's/^/     /' "$DEMO_DIR/batchfs.log"
echo "   (/stats counts it in bad_samples and lists it in recent_bad_samples)"

echo "== 10. unmount: fusermount3 -u mnt =="
fusermount3 -u "$MNT"
echo "   unmounted"
echo
echo "demo OK. Files are in $DEMO_DIR/."
