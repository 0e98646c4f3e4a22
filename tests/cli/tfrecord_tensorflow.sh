#!/usr/bin/env bash
# tests/cli/tfrecord_tensorflow.sh — the TFRecord fixture of mkbatchfs_fields.sh is made by
# hand from the format's spec (TensorFlow is too heavy for CI's venv); here TensorFlow's
# own tf.io.TFRecordWriter writes the same samples as tf.train.Example, and mkbatchfs must
# pack that file, the hand-made one and the webdataset TarWriter shard into one
# byte-identical .bfs. Runs where TensorFlow is installed: $BFS_TF_PY, a python with
# tensorflow (e.g. a venv with tensorflow-cpu); otherwise says so and skips (77).
# Seen passing with TensorFlow 2.21.0 (tensorflow-cpu from PyPI), 2026-11-28.
. "$(dirname "$0")/lib.sh" tfrecord_tf
TFPY=${BFS_TF_PY:-}
if [ -z "$TFPY" ] || ! "$TFPY" -c "import tensorflow" 2>/dev/null; then
    echo "SKIP: no TensorFlow (set BFS_TF_PY to a python with tensorflow to run this check)"
    exit 77
fi
source tests/pyenv.sh
"$GEN" "$T/gen" 3 3 24 96 5 >/dev/null || fail "gen_imagefolder failed"
# the hand-made fixtures, from mkbatchfs_fields.sh's own generator
sed -n '/^cat >"\$T\/make.py" <<.EOF.$/,/^EOF$/p' tests/cli/mkbatchfs_fields.sh | sed '1d;$d' >"$T/make.py"
[ -s "$T/make.py" ] || fail "mkbatchfs_fields.sh's make.py not found"
"$PY" "$T/make.py" "$T/out" "$T/gen" >/dev/null || fail "make.py"
"$TFPY" - "$T/gen" "$T/tf.tfrecord" <<'PY' 2>"$T/tf.log" || fail "TensorFlow's writer: $(tail -3 "$T/tf.log")"
import os, sys
import tensorflow as tf
gen, path = sys.argv[1], sys.argv[2]
imgs = sorted(os.path.join(d, f) for d, _, fs in os.walk(gen) for f in fs)
CAPS = ["a photo of a cat", "Straße in München — at night", "日本語のキャプション",
        "emoji 🚀 and ümlauts", 'a "quoted", comma, caption', "two\nlines", "x", "cafés"]
with tf.io.TFRecordWriter(path) as wr:
    for i, p in enumerate(imgs):
        nb = (i + 1) % 3
        boxes = [[1.5 + b, 2.0, 10.25 + b, 20.0 + 0.5 * i] for b in range(nb)]
        F = tf.train.Feature
        f = {"image/encoded": F(bytes_list=tf.train.BytesList(value=[open(p, "rb").read()])),
             "caption": F(bytes_list=tf.train.BytesList(value=[(CAPS[i % len(CAPS)] + " #%d" % i).encode()])),
             "boxes": F(float_list=tf.train.FloatList(value=[v for b in boxes for v in b])),
             "classes": F(int64_list=tf.train.Int64List(value=[(i + b) % 5 for b in range(nb)])),
             "image/class/label": F(int64_list=tf.train.Int64List(value=[i % 3]))}
        wr.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())
PY
f=(--field image=image/encoded --field caption=caption:text --field boxes=boxes:boxes
   --field box_classes=classes:array:i64:follows=boxes --field label=image/class/label:label)
run "$MK" --quiet "${f[@]}" "$T/tf.tfrecord" "$T/tf.bfs"
expect_rc 0 "packing TensorFlow's TFRecord"
run "$MK" --quiet "${f[@]}" "$T/out/t.tfrecord" "$T/hand.bfs"
expect_rc 0 "packing the hand-made TFRecord"
run "$MK" --quiet --field image=jpg --field caption=txt:text --field boxes=json:boxes:boxes \
    --field box_classes=json:classes:array:i64:follows=boxes --field label=cls:label \
    "$T/out/w.tar" "$T/w.bfs"
expect_rc 0 "packing the TarWriter shard"
cmp -s "$T/tf.bfs" "$T/hand.bfs" || fail "TensorFlow's TFRecord packs otherwise than the hand-made one"
cmp -s "$T/tf.bfs" "$T/w.bfs" || fail "TensorFlow's TFRecord packs otherwise than the TarWriter shard"
ok "TensorFlow's TFRecordWriter, the hand-made TFRecord and the TarWriter shard pack to one .bfs"
