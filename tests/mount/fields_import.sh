#!/usr/bin/env bash
# tests/mount/fields_import.sh — from a webdataset.TarWriter shard to batches: samples of
# a JPEG, a caption (non-ASCII UTF-8), boxes and class ids in a JSON, and a class, packed
# by mkbatchfs --field and mounted; every batch of two epochs carries each sample's
# caption byte for byte, its label and its class ids (those of the boxes the crop kept,
# in order; looked up by the batch's indices),
# and images equal to those of the same shard packed --image-only and mounted with the
# same options. (mkbatchfs_fields.sh shows the TFRecord and manifest packs of the same
# samples are the same file.)
. "$(dirname "$0")/lib.sh"
require_fuse
need_py
"$PY" -c 'import webdataset' || fail "the test venv lacks webdataset (tests/requirements.txt)"

"$GEN" "$T/gen" 2 9 40 120 11 >/dev/null || fail "gen_imagefolder failed"
cat >"$T/make.py" <<'EOF'
import json, os, sys
import webdataset as wds
out, gen = sys.argv[1], sys.argv[2]
imgs = sorted(os.path.join(d, f) for d, _, fs in os.walk(gen) for f in fs)
caps = ["ein Bild — Nr. %d", "画像 %d", "plain %d", "naïve café %d 🚀"]
truth = []
with wds.TarWriter(os.path.join(out, "s.tar")) as sink:
    for i, p in enumerate(imgs):
        nb = i % 3
        s = dict(caption=caps[i % 4] % i, label=i % 5,
                 boxes=[[1.0 + b, 2.0, 9.5 + b, 12.0] for b in range(nb)],
                 classes=[(7 * i + b) % 11 for b in range(nb)])
        truth.append(s)
        sink.write({"__key__": "k%04d" % i, "jpg": open(p, "rb").read(), "txt": s["caption"],
                    "json": {"boxes": s["boxes"], "classes": s["classes"]}, "cls": s["label"]})
json.dump(truth, open(os.path.join(out, "truth.json"), "w"))
EOF
"$PY" "$T/make.py" "$T" "$T/gen" || fail "writing the shard"
"$MKBATCHFS" --quiet --field image=jpg --field caption=txt:text --field boxes=json:boxes:boxes \
    --field box_classes=json:classes:array:i64:follows=boxes --field label=cls:label \
    "$T/s.tar" "$T/f.bfs" || fail "packing the shard with fields"
"$MKBATCHFS" --quiet --image-only "$T/s.tar" "$T/i.bfs" || fail "packing the shard --image-only"

mkdir "$T/mf" "$T/mi"
OPTS=batch=4,size=32,seed=3
mount_bfs "$T/f.bfs" "$T/mf" -o "$OPTS"
mount_bfs "$T/i.bfs" "$T/mi" -o "$OPTS"
NB=$(ls "$T/mf/epoch/0" | wc -l)
[ "$NB" -ge 4 ] || fail "only $NB batches"
"$PY" - "$T" "$NB" <<'EOF' || fail "batches differ from the shard's samples"
import json, sys
import numpy as np
from safetensors.numpy import load
T, nb = sys.argv[1], int(sys.argv[2])
truth = json.load(open(T + "/truth.json"))
seen = 0
for e in (0, 1):
    for k in range(nb):
        b = load(open(f"{T}/mf/epoch/{e}/batch_{k}", "rb").read())
        i = load(open(f"{T}/mi/epoch/{e}/batch_{k}", "rb").read())
        assert np.array_equal(b["indices"], i["indices"]) and np.array_equal(b["images"], i["images"])
        for r, idx in enumerate(b["indices"]):
            s = truth[idx]
            n = b["caption_lengths"][r]
            assert bytes(b["caption"][r, :n]) == s["caption"].encode(), (idx, bytes(b["caption"][r, :n]))
            assert b["labels"][r] == s["label"]
            # boxes follow the crop: those left outside are dropped, their class ids too
            m = b["box_classes_lengths"][r]
            assert m == b["boxes_counts"][r] <= len(s["boxes"]), idx
            kept, it = list(b["box_classes"][r, :m]), iter(s["classes"])
            assert all(c in it for c in kept), (idx, kept, s["classes"])  # in order
            seen += 1
assert seen == 2 * nb * 4, seen
EOF
unmount_bfs "$T/mf"
unmount_bfs "$T/mi"
ok "a TarWriter shard packed with --field serves its captions byte for byte, labels and class ids, and the images of its --image-only pack"
