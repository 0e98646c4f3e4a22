#!/usr/bin/env bash
# tests/cli/mkbatchfs_fields.sh — mkbatchfs keeps every field of a sample (issue 31): one
# set of samples (the generator's photo-like JPEGs, captions with non-ASCII UTF-8, a JSON
# of boxes and classes, a label) written four ways by code that is not ours:
#   - a WebDataset shard by the webdataset package's TarWriter (tests/requirements.txt);
#   - a TFRecord of tf.train.Example, made here from the format's own spec (length,
#     masked CRC-32C, the protobuf encoded by hand: TensorFlow is too heavy for CI; the
#     same encoder as mkbatchfs_shards.sh, whose output was checked against
#     tf.io.tf_record_iterator / tf.train.Example.FromString by hand);
#   - a JSONL manifest and a CSV one (Python's json and csv modules, RFC 4180 quoting);
# each packed with --field into the same fields, and the four .bfs files are
# byte-identical (same fields, values, labels and classes), their captions byte-equal to
# the source text (--cat F I caption), their boxes and classes equal to the source
# numbers. Without --field every member is kept (--info lists the fields). Bad input —
# a JSON that does not parse, text that is not UTF-8, a --field of the wrong type, a bad
# .npy header, a required member missing, per-box values that do not pair with the
# boxes, manifest lines that are not JSON, a missing image — is skipped and listed with
# its reason (the sample and member named), and --strict fails naming them.
. "$(dirname "$0")/lib.sh" fields
[ -x "$MK" ] || fail "$MK not built (run make)"
[ -x "$GEN" ] || fail "$GEN not built (run make all-tests)"
source tests/pyenv.sh
"$PY" -c 'import webdataset' || fail "the test venv lacks webdataset (tests/requirements.txt)"

"$GEN" "$T/gen" 3 3 24 96 5 >/dev/null || fail "gen_imagefolder failed"

cat >"$T/make.py" <<'EOF'
import csv, io, json, os, shutil, struct, sys, tarfile
import webdataset as wds

out, gen = sys.argv[1], sys.argv[2]
imgs = sorted(os.path.join(d, f) for d, _, fs in os.walk(gen) for f in fs)
CAPS = ["a photo of a cat", "Straße in München — at night", "日本語のキャプション",
        "emoji 🚀 and ümlauts", 'a "quoted", comma, caption', "two\nlines", "x", "cafés"]
samples = []
for i, p in enumerate(imgs):
    nb = (i + 1) % 3  # 1, 2 or 0 boxes: exact in f32
    boxes = [[1.5 + b, 2.0, 10.25 + b, 20.0 + 0.5 * i] for b in range(nb)]
    classes = [(i + b) % 5 for b in range(nb)]
    samples.append(dict(key="s%03d" % i, jpg=open(p, "rb").read(),
                        caption=CAPS[i % len(CAPS)] + " #%d" % i, boxes=boxes,
                        classes=classes, label=i % 3))
os.makedirs(out, exist_ok=True)
json.dump([dict(caption=s["caption"], boxes=s["boxes"], classes=s["classes"],
                label=s["label"]) for s in samples], open(os.path.join(out, "truth.json"), "w"))

# ---- WebDataset, by the webdataset package ----
with wds.TarWriter(os.path.join(out, "w.tar")) as sink:
    for s in samples:
        sink.write({"__key__": s["key"], "jpg": s["jpg"], "txt": s["caption"],
                    "json": {"boxes": s["boxes"], "classes": s["classes"], "note": "x"},
                    "cls": s["label"]})

# ---- TFRecord of tf.train.Example, from the spec ----
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    TABLE.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = (c >> 8) ^ TABLE[(c ^ x) & 0xFF]
    return c ^ 0xFFFFFFFF
assert crc32c(b"123456789") == 0xE3069283
def mask(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
def record(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", mask(crc32c(n))) + data + struct.pack("<I", mask(crc32c(data)))
def varint(v):
    v &= (1 << 64) - 1
    b = bytearray()
    while True:
        x = v & 0x7F
        v >>= 7
        b.append(x | (0x80 if v else 0))
        if not v:
            return bytes(b)
def field(num, wt, payload):
    if wt == 2:
        return varint(num << 3 | 2) + varint(len(payload)) + payload
    return varint(num << 3 | wt) + payload
def bytes_feature(*vals):
    return field(1, 2, b"".join(field(1, 2, v) for v in vals))
def int64_feature(*vals):
    return field(3, 2, field(1, 2, b"".join(varint(v) for v in vals)))
def float_feature(*vals):
    return field(2, 2, field(1, 2, b"".join(struct.pack("<f", v) for v in vals)))
def example(feats):
    return field(1, 2, b"".join(field(1, 2, field(1, 2, k.encode()) + field(2, 2, v))
                                for k, v in feats))
with open(os.path.join(out, "t.tfrecord"), "wb") as f:
    for s in samples:
        f.write(record(example([
            ("image/encoded", bytes_feature(s["jpg"])),
            ("caption", bytes_feature(s["caption"].encode())),
            ("boxes", float_feature(*[v for b in s["boxes"] for v in b])),
            ("classes", int64_feature(*s["classes"])),
            ("image/class/label", int64_feature(s["label"]))])))

with open(os.path.join(out, "empty_first.tfrecord"), "wb") as f:  # no boxes at first
    for s in samples[2:4]:
        f.write(record(example([("image/encoded", bytes_feature(s["jpg"])),
                                ("boxes", float_feature(*[v for b in s["boxes"] for v in b]))])))

# ---- manifests: JSONL and CSV beside an image directory ----
os.makedirs(os.path.join(out, "m", "imgs"))
for s in samples:
    open(os.path.join(out, "m", "imgs", s["key"] + ".jpg"), "wb").write(s["jpg"])
with open(os.path.join(out, "m", "train.jsonl"), "w", encoding="utf-8") as f:
    for s in samples:
        f.write(json.dumps({"image": "imgs/%s.jpg" % s["key"], "caption": s["caption"],
                            "boxes": s["boxes"], "classes": s["classes"],
                            "label": s["label"]}, ensure_ascii=False) + "\n")
with open(os.path.join(out, "m", "train.csv"), "w", encoding="utf-8", newline="") as f:
    w = csv.writer(f)  # RFC 4180: quotes cells with commas, quotes, line breaks
    w.writerow(["file_name", "caption", "boxes", "classes", "label"])
    for s in samples:
        w.writerow(["imgs/%s.jpg" % s["key"], s["caption"], json.dumps(s["boxes"]),
                    json.dumps(s["classes"]), s["label"]])

# ---- bad input (tarfile: bytes as we choose them) ----
def add(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    tf.addfile(ti, io.BytesIO(data))
def npy(arr_bytes, descr, shape):
    h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + arr_bytes
good = samples[1]
J = lambda d: json.dumps(d).encode()
with tarfile.open(os.path.join(out, "bad.tar"), "w") as tf:
    def sample(key, txt=b"ok", js=None, cls=b"1", extra=None):
        add(tf, key + ".jpg", good["jpg"])
        if txt is not None:
            add(tf, key + ".txt", txt)
        add(tf, key + ".json", js if js is not None else J({"boxes": [[1, 2, 3, 4]], "classes": [1]}))
        if cls is not None:
            add(tf, key + ".cls", cls)
        if extra:
            add(tf, key + "." + extra, b"extra")
    sample("good0")
    sample("badjson", js=b'{"boxes": [[1, 2, 3, 4]],}')
    sample("badutf8", txt=b"caf\xe9")
    sample("strboxes", js=J({"boxes": "oops", "classes": []}))
    sample("fraction", js=J({"boxes": [[1, 2, 3, 4]], "classes": [1.5]}))
    sample("unpaired", js=J({"boxes": [[1, 2, 3, 4], [5, 6, 7, 8]], "classes": [1]}))
    sample("threecols", js=J({"boxes": [[1, 2, 3]], "classes": [1]}))
    sample("nocaption", txt=None)
    sample("nolabel", cls=None)
    sample("extra", extra="seg")
    sample("good1")
with tarfile.open(os.path.join(out, "npy.tar"), "w") as tf:
    for i in range(3):
        add(tf, "n%d.jpg" % i, good["jpg"])
        add(tf, "n%d.npy" % i, npy(struct.pack("<%df" % (3 * (i + 1)), *range(3 * (i + 1))),
                                     "<f4", "(%d, 3)" % (i + 1)))
    add(tf, "n3.jpg", good["jpg"])
    add(tf, "n3.npy", npy(b"\0" * 8, ">f4", "(2,)"))  # big-endian: refused
    add(tf, "n4.jpg", good["jpg"])
    add(tf, "n4.npy", b"\x93NUMPY\x01\x00\x50\x00{'descr'")  # header cut short
    add(tf, "n5.jpg", good["jpg"])
    add(tf, "n5.npy", npy(struct.pack("<3f", 1, 2, 3), "<f4", "(1, 3)"))
from PIL import Image
with tarfile.open(os.path.join(out, "two.tar"), "w") as tf:  # three images per sample
    for i, s in enumerate(samples[:4]):
        add(tf, "k%d.jpg" % i, s["jpg"])
        add(tf, "k%d.mask.jpg" % i, samples[-1]["jpg"] if i != 2 else b"not a jpeg")
        png = io.BytesIO()
        Image.open(io.BytesIO(s["jpg"])).convert("L").save(png, "PNG")
        add(tf, "k%d.png" % i, png.getvalue())
        if i == 0:
            open(os.path.join(out, "k0.png"), "wb").write(png.getvalue())
with tarfile.open(os.path.join(out, "npy16.tar"), "w") as tf:
    add(tf, "a.jpg", good["jpg"])
    add(tf, "a.npy", npy(struct.pack("<4H", 1, 2, 65535, 4), "<u2", "(4,)"))
with open(os.path.join(out, "m", "bad.jsonl"), "w") as f:
    f.write(json.dumps({"image": "imgs/s000.jpg", "caption": "fine", "label": 0}) + "\n")
    f.write("not json\n")
    f.write("\n")  # a blank line: no sample
    f.write(json.dumps({"image": "imgs/missing.jpg", "caption": "x", "label": 0}) + "\n")
    f.write(json.dumps({"image": 5, "caption": "x", "label": 0}) + "\n")
    f.write(json.dumps({"image": "imgs/s001.jpg", "caption": 7, "label": 0}) + "\n")
    f.write(json.dumps({"image": "imgs/s002.jpg", "caption": "fine too", "label": 1}) + "\n")
with open(os.path.join(out, "m", "bad.csv"), "wb") as f:
    f.write(b'image,caption,label\r\nimgs/s000.jpg,"fine, quoted",0\r\nimgs/s001.jpg,two,cells,0\r\n'
            b'imgs/s002.jpg,"multi\r\nline ""q""",1\r\nimgs/s003.jpg,"open quote,0\r\n')
EOF
"$PY" "$T/make.py" "$T/d" "$T/gen" || fail "making the datasets"
D=$T/d
N=$(ls "$T"/d/m/imgs | wc -l)

# ---- one set of samples, four writers, one .bfs -----------------------------------------
common=(--field caption=txt:text --field boxes=json:boxes:boxes
        --field box_classes=json:classes:array:i64:follows=boxes --field label=cls:label)
run "$MK" --field image=jpg "${common[@]}" "$D/w.tar" "$T/w.bfs"
expect_rc 0 "packing the TarWriter shard with --field"
expect_err "fields: image image, caption text, boxes boxes, box_classes array i64; label from cls" "fields summary"
run "$MK" --field image=image/encoded --field caption=caption:text --field boxes=boxes:boxes \
    --field box_classes=classes:array:i64:follows=boxes --field label=image/class/label:label \
    "$D/t.tfrecord" "$T/t.bfs"
expect_rc 0 "packing the TFRecord with --field"
for m in jsonl csv; do
    img=image
    [ $m = csv ] && img=file_name
    run "$MK" --field image=$img --field caption=caption:text --field boxes=boxes:boxes \
        --field box_classes=classes:array:i64:follows=boxes --field label=label:label \
        "$D/m/train.$m" "$T/$m.bfs"
    expect_rc 0 "packing the $m manifest with --field"
    expect_err "read 1 manifest" "$m: summary"
done
for f in t jsonl csv; do
    cmp -s "$T/w.bfs" "$T/$f.bfs" || fail "$f.bfs differs from the WebDataset pack w.bfs"
done
ok "a TarWriter shard, a TFRecord, a JSONL and a CSV manifest of the same samples pack to one byte-identical .bfs"

"$MK" --info "$T/w.bfs" >"$T/info"
grep -q "^format: *batchfs dataset, version 3" "$T/info" || fail "--info: not version 3"
grep -qE "^ +0  image +image +u8 +- +no +$N " "$T/info" || fail "--info: image field"
grep -qE "^ +1  caption +text +u8 +\[\*\] +no +$N " "$T/info" || fail "--info: caption field"
grep -qE "^ +2  boxes +boxes +f32 +\[\*,4\] +no +[0-9]+ +[0-9]+ +8$" "$T/info" || fail "--info: boxes field (max 8 values)"
grep -qE "^ +3  box_classes +array +i64 +\[\*\] +no .* 2 \(follows boxes\)$" "$T/info" || fail "--info: box_classes follows boxes"
"$PY" - "$MK" "$T/w.bfs" "$D/truth.json" <<'EOF' || fail "values differ from the source"
import json, struct, subprocess, sys
mk, bfs, truth = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
cat = lambda i, f: subprocess.run([mk, "--cat", bfs, str(i), f], check=True,
                                  stdout=subprocess.PIPE).stdout
for i, s in enumerate(truth):
    assert cat(i, "caption") == s["caption"].encode(), (i, cat(i, "caption"))
    b = cat(i, "boxes")
    assert list(struct.unpack("<%df" % (len(b) // 4), b)) == [v for r in s["boxes"] for v in r], i
    c = cat(i, "box_classes")
    assert list(struct.unpack("<%dq" % (len(c) // 8), c)) == s["classes"], i
EOF
ok "captions come back byte-equal (non-ASCII, quotes, commas, line breaks), boxes and classes equal; --info lists the fields"

# ---- every member kept without --field ---------------------------------------------------
run "$MK" "$D/w.tar" "$T/wa.bfs"
expect_rc 0 "packing the TarWriter shard with every member"
expect_err "fields: jpg image, json bytes (optional), txt text (optional); label from cls" "every member, named by extension"
cmp -s <("$MK" --cat "$T/wa.bfs" 4 txt) <("$MK" --cat "$T/w.bfs" 4 caption) || fail "txt field differs"
run "$MK" "$D/t.tfrecord" "$T/ta.bfs"
expect_rc 0 "packing the TFRecord with every feature"
expect_err "fields: image_encoded image, boxes array f32 (optional), caption bytes (optional), classes array i64 (optional); label from image/class/label" "every feature"
run "$MK" "$D/m/train.jsonl" "$T/ja.bfs"
expect_rc 0 "packing the JSONL manifest with every column"
expect_err "fields: image image, caption text (optional), boxes array f32 (optional), classes array i64 (optional); label from label" "every column"
cp "$D/m/train.jsonl" "$D/m/train.list"
run "$MK" --format manifest --field image=image --field caption=caption:text --field boxes=boxes:boxes \
    --field box_classes=classes:array:i64:follows=boxes --field label=label:label \
    "$D/m/train.list" "$T/list.bfs"
expect_rc 0 "--format manifest with another name"
cmp -s "$T/w.bfs" "$T/list.bfs" || fail "--format manifest: differs from the .jsonl's pack"
run "$MK" --image-only "$D/w.tar" "$T/wi.bfs"
expect_rc 0 "--image-only"
"$MK" --info "$T/wi.bfs" | grep -q "version 1" || fail "--image-only: not version 1"
run "$MK" "$D/npy.tar" "$T/npy.bfs"
expect_rc 0 "packing .npy members"
expect_err "fields: jpg image, npy array f32 (optional)" "npy field"
expect_err "npy.tar:n3: member 'npy': bad .npy: .npy dtype '>f4'" "big-endian npy"
expect_err "npy.tar:n4: member 'npy': bad .npy: .npy header of 80 bytes cut short" "npy header cut short"
"$MK" --info "$T/npy.bfs" | grep -qE "^ +1  npy +array +f32 +\[\*,3\] +yes +4 +84 " || fail "--info: the npy field's rows of 3 (4 present, 84 bytes)"
[ "$("$MK" --cat "$T/npy.bfs" 2 npy | od -An -tf4 | tr -s ' \n' ' ')" = " 0 1 2 3 4 5 6 7 8 " ] || fail "npy values"
run "$MK" "$D/empty_first.tfrecord" "$T/ef.bfs"
expect_rc 0 "a TFRecord whose first boxes are empty"
expect_err "fields: image_encoded image, boxes array f32 (optional)" "an empty float_list is still f32"
run "$MK" "$D/two.tar" "$T/two.bfs"
expect_rc 0 "two images per sample"
expect_err "fields: jpg image, mask_jpg image (optional), png image (optional)" "a second and third image field"
expect_err "$D/two.tar:k2: not a JPEG, PNG or WebP image (image field mask_jpg)" "a second image that is not one"
"$MK" --info "$T/two.bfs" | grep -qE "^ +2  png +image +u8 +- +yes +3 " || fail "--info: the png field in 3 samples"
cmp -s <("$MK" --cat "$T/two.bfs" 0 png) "$D/k0.png" || fail "a PNG member is stored as it is"
"$MK" --info "$T/two.bfs" | grep -qE "^ +1  mask_jpg +image +u8 +- +yes +3 " || fail "--info: mask_jpg in 3 samples"
cmp -s <("$MK" --cat "$T/two.bfs" 0 mask_jpg) <("$MK" --cat "$T/w.bfs" $((N - 1)) image) || fail "the second image's bytes (re-encoded as the first's are)"
run "$MK" "$D/npy16.tar" "$T/n16.bfs"
expect_rc 0 "a <u2 .npy"
expect_err "fields: jpg image, npy array u16 (optional)" "a .npy keeps its dtype"
[ "$("$MK" --cat "$T/n16.bfs" 0 npy | od -An -tu2 | tr -s ' \n' ' ')" = " 1 2 65535 4 " ] || fail "u16 npy values"
ok "without --field every member is a field (WebDataset, TFRecord, JSONL); .npy arrays keep their dtype; --image-only; --format manifest"

# ---- bad input ---------------------------------------------------------------------------
run "$MK" --field image=jpg "${common[@]}" "$D/bad.tar" "$T/bad.bfs"
expect_rc 0 "a shard with bad samples"
B=$D/bad.tar
expect_err "skipped 8 of 11 samples:" "skip count"
expect_err "$B:badjson: member 'json': not JSON (" "a JSON that does not parse"
expect_err "$B:badutf8: member 'txt': text that is not UTF-8 (field caption, text)" "not UTF-8"
expect_err "$B:strboxes: member 'json' key 'boxes': a string, not numbers (field boxes, boxes)" "wrong type"
expect_err "$B:fraction: member 'json' key 'classes': a fraction where the dtype holds integers (field box_classes, array)" "fraction for i64"
expect_err "$B:unpaired: field box_classes has 1 values, and its boxes boxes 2 boxes" "unpaired per-box values"
expect_err "$B:threecols: member 'json' key 'boxes': rows of another shape than the field's (field boxes, boxes)" "boxes of 3"
expect_err "$B:nocaption: no member 'txt' (field caption is required)" "required member missing"
expect_err "$B:nolabel: no label (no member 'cls')" "no label"
run "$MK" --strict --field image=jpg "${common[@]}" "$D/bad.tar" "$T/strict.bfs"
expect_rc 1 "--strict with bad samples"
expect_err "$B:badjson: member 'json': not JSON" "--strict names the sample and member"
[ ! -e "$T/strict.bfs" ] || fail "--strict left a file"
run "$MK" --field image=jpg --field caption=txt:text:optional --field label=cls:label "$D/bad.tar" "$T/opt.bfs"
expect_rc 0 "an optional caption"
expect_err "skipped 2 of 11 samples:" "optional: only badutf8 and nolabel skipped"
"$MK" --info "$T/opt.bfs" | grep -qE "^ +1  caption +text +u8 +\[\*\] +yes +8 " || fail "--info: optional caption present in 8 of 9"
run "$MK" "$D/bad.tar" "$T/auto.bfs"
expect_rc 0 "every member of the bad shard"
expect_err "$B:badutf8: member 'txt': text that is not UTF-8" "UTF-8 checked without --field"
expect_err "note: 1 members (the first: 'seg') are not among the fields the first sample set" "extra member counted"
M=$D/m/bad.jsonl
run "$MK" --field image=image --field caption=caption:text --field label=label:label "$M" "$T/mb.bfs"
expect_rc 0 "a JSONL manifest with bad lines"
expect_err "skipped 4 of 6 samples:" "JSONL skip count (the blank line is no sample)"
expect_err "$M:line 2: not one JSON object (" "a line that is not JSON"
expect_err "$M:line 4: image 'imgs/missing.jpg': " "a missing image"
expect_err "$M:line 5: column 'image' is not a path (a string)" "an image that is not a path"
expect_err "$M:line 6: member 'caption': not text (a string) (field caption, text)" "a number for text"
head -n 2 "$M" | tail -n 1 >"$D/m/none.jsonl" # only "not json"
run "$MK" "$D/m/none.jsonl" "$T/none.bfs"
expect_rc 1 "a manifest of no sample"
expect_err "no sample could be packed (1 samples in 1 manifest, all skipped)" "nothing packed"
C=$D/m/bad.csv
run "$MK" --field image=image --field caption=caption:text --field label=label:label "$C" "$T/cb.bfs"
expect_rc 1 "a CSV with a quote left open"
expect_err "$C: line 6: a quoted cell is still open at the end of the file" "open quote named by its line"
head -c -21 "$C" >"$T/bad2.csv" # without the open quote's record
cp "$T/bad2.csv" "$D/m/bad2.csv"
run "$MK" --field image=image --field caption=caption:text --field label=label:label "$D/m/bad2.csv" "$T/cb.bfs"
expect_rc 0 "a CSV with a bad record"
expect_err "$D/m/bad2.csv:line 3: 4 cells, and the header has 3 columns" "wrong cell count"
[ "$("$MK" --cat "$T/cb.bfs" 1 caption)" = $'multi\r\nline "q"' ] || fail "CSV quoting: line break and doubled quotes"
printf 'image,caption,label\nimgs/s000.jpg,1984,0\nimgs/s001.jpg,1.50,1\n' >"$D/m/num.csv"
run "$MK" --field image=image --field caption=caption:text --field label=label:label "$D/m/num.csv" "$T/num.bfs"
expect_rc 0 "captions that look like numbers"
[ "$("$MK" --cat "$T/num.bfs" 0 caption)/$("$MK" --cat "$T/num.bfs" 1 caption)" = "1984/1.50" ] ||
    fail "a CSV caption that looks like a number is not kept as written"
ok "bad input skipped and named (JSON, UTF-8, wrong types, .npy, unpaired boxes, missing members, manifest lines), --strict fails"

# ---- usage -------------------------------------------------------------------------------
run "$MK" --field caption "$D/w.tar" "$T/x.bfs"
expect_rc 2 "--field without ="
expect_err "expected NAME=MEMBER" "--field syntax"
run "$MK" --field 1x=txt "$D/w.tar" "$T/x.bfs"
expect_rc 2 "--field with a bad name"
run "$MK" --field a=txt:text --field a=json "$D/w.tar" "$T/x.bfs"
expect_rc 2 "--field twice"
run "$MK" --field caption=txt:text "$D/w.tar" "$T/x.bfs"
expect_rc 1 "--field without an image"
expect_err "no --field maps an image" "no image field"
run "$MK" --field image=jpg --field c=json:classes:array:i64:follows=image "$D/w.tar" "$T/x.bfs"
expect_rc 1 "follows= naming an image"
expect_err "follows=image must name a boxes field given before it" "follows"
run "$MK" --field image=jpg "$T/gen" "$T/x.bfs"
expect_rc 1 "--field with an ImageFolder"
expect_err "so --field does not apply" "--field with a folder"
run "$MK" --image-only "$D/m/train.jsonl" "$T/x.bfs"
expect_rc 1 "--image-only with a manifest"
run "$MK" --field image=jpg --image-only "$D/w.tar" "$T/x.bfs"
expect_rc 1 "--field with --image-only"
ls "$T"/x.bfs* >/dev/null 2>&1 && fail "a failed pack left a file"
ok "usage: --field syntax, names, no image, follows, sources it does not apply to"
