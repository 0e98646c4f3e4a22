#!/usr/bin/env bash
# tests/cli/mkbatchfs_shards.sh — mkbatchfs packs WebDataset tar shards and TFRecord files
# of tf.train.Example made here (Python's tarfile, and a TFRecord/protobuf encoder of a
# few lines below with its own CRC-32C: no TensorFlow), and the .bfs is byte-identical to
# the pack of the same images as an ImageFolder with classes named 0, 1, 2 — with the
# default restart re-encoding, --no-restart and --raw, from one shard or several, given
# as files, a directory or a glob, with samples to skip among them (no label, no image,
# not a JPEG, a JPEG cut short — left out in every mode alike —, a bad .cls or .json, a
# record that is no Example), each listed with its reason; packs are deterministic; a truncated or corrupt tar and a TFRecord with a bad
# CRC fail naming the file and the byte; options are checked.
. "$(dirname "$0")/lib.sh" shards
same() { # A.bfs B.bfs WHAT
    cmp -s "$1" "$2" || fail "$3: $2 differs from $1"
}
[ -x "$MK" ] || fail "$MK not built (run make)"
[ -x "$GEN" ] || fail "$GEN not built (run make all-tests)"

# ---- the reference: an ImageFolder with classes 0, 1, 2 --------------------------------
"$GEN" "$T/gen" 3 7 24 80 3 >/dev/null || fail "gen_imagefolder failed"
mkdir -p "$T/folder"
for c in 0 1 2; do mv "$T/gen/class_00$c" "$T/folder/$c"; done
printf 'not a jpeg\n' >"$T/notjpeg.bin"

# make_shards.py OUTDIR FOLDER: the folder's images in its dataset order (classes by name,
# files by name), as
#   wds/shard-00000.tar, wds/shard-00001.tar (split mid-class): labels in .cls or .json;
#     between them samples to skip: no label, no image, not a JPEG, bad .cls, bad .json,
#     a label out of range, a JPEG cut short; and members that are no sample (a
#     directory, a README);
#   tfr/data.tfrecord-00000-of-00002, -00001-of-00002: one Example per image, with extra
#     features, labels packed and unpacked; skips: no label, no image, a label that is a
#     bytes list, a record that is not an Example, not a JPEG, a JPEG cut short;
#   custom/a.tfrecord (features img, y) and custom/a.tar (.png... no: .jpeg images only,
#     labels in .json under "y") for --image-key / --label-key.
cat >"$T/make_shards.py" <<'EOF'
import io, json, os, struct, sys, tarfile

out, folder = sys.argv[1], sys.argv[2]
samples = []  # (label, path) in ImageFolder order
for c in sorted(os.listdir(folder)):
    for f in sorted(os.listdir(os.path.join(folder, c))):
        samples.append((int(c), os.path.join(folder, c, f)))
notjpeg = open(sys.argv[3], "rb").read()

# ---- CRC-32C (Castagnoli) and TFRecord framing, as tensorflow/core/lib/hash/crc32c.h ----
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

assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C

def mask(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def record(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", mask(crc32c(n))) + data + struct.pack("<I", mask(crc32c(data)))

# ---- protobuf: just what tf.train.Example needs -------------------------------------------
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

def int64_feature(*vals, packed=True):
    if packed:
        lst = field(1, 2, b"".join(varint(v) for v in vals))
    else:
        lst = b"".join(field(1, 0, varint(v)) for v in vals)
    return field(3, 2, lst)

def float_feature(*vals):
    return field(2, 2, field(1, 2, b"".join(struct.pack("<f", v) for v in vals)))

def example(feats):
    entries = b"".join(field(1, 2, field(1, 2, k.encode()) + field(2, 2, v)) for k, v in feats)
    return field(1, 2, entries)

def jpeg(path):
    return open(path, "rb").read()

def cut(path):  # a JPEG cut short: its header intact, only a whole decode tells
    b = jpeg(path)
    return b[:len(b) * 2 // 3]

# ---- WebDataset ---------------------------------------------------------------------------
os.makedirs(os.path.join(out, "wds"))
def add(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 0
    tf.addfile(ti, io.BytesIO(data))

half = len(samples) // 2 + 1
for s, part in enumerate((samples[:half], samples[half:])):
    with tarfile.open(os.path.join(out, "wds", "shard-%05d.tar" % s), "w",
                      format=tarfile.GNU_FORMAT) as tf:
        if s == 0:
            d = tarfile.TarInfo("imgs")
            d.type = tarfile.DIRTYPE
            tf.addfile(d)
            add(tf, "README", b"members without a '.' are in no sample\n")
        for i, (label, path) in enumerate(part):
            key = "imgs/s%d_%03d" % (s, i)
            if s == 1 and i == 2:  # a long name: a GNU 'L' header
                key = "imgs/" + "long" * 40 + "/x"
            add(tf, key + ".jpg", jpeg(path))
            if i % 2:
                add(tf, key + ".cls", b"%d\n" % label)
            else:
                add(tf, key + ".json", json.dumps(
                    {"caption": "a \"label\": 9", "nested": {"label": 7}, "label": label}).encode())
            add(tf, key + ".txt", b"other members are read past")
            if i == 1:  # samples to skip, between good ones
                add(tf, "skip/nolabel%d.jpg" % s, jpeg(path))
                add(tf, "skip/noimage%d.cls" % s, b"1")
                add(tf, "skip/notjpeg%d.jpg" % s, notjpeg)
                add(tf, "skip/notjpeg%d.cls" % s, b"1")
                add(tf, "skip/badcls%d.jpg" % s, jpeg(path))
                add(tf, "skip/badcls%d.cls" % s, b"one")
                add(tf, "skip/badjson%d.jpeg" % s, jpeg(path))
                add(tf, "skip/badjson%d.json" % s, b'{"label": 1,}')
                add(tf, "skip/floatlabel%d.jpg" % s, jpeg(path))
                add(tf, "skip/floatlabel%d.json" % s, b'{"label": 1.5}')
                add(tf, "skip/range%d.jpg" % s, jpeg(path))
                add(tf, "skip/range%d.cls" % s, b"-1")
                add(tf, "skip/cut%d.jpg" % s, cut(path))
                add(tf, "skip/cut%d.cls" % s, b"1")

# ---- TFRecord -----------------------------------------------------------------------------
os.makedirs(os.path.join(out, "tfr"))
for s, part in enumerate((samples[:half], samples[half:])):
    with open(os.path.join(out, "tfr", "data.tfrecord-%05d-of-00002" % s), "wb") as f:
        for i, (label, path) in enumerate(part):
            feats = [("image/format", bytes_feature(b"jpeg")),
                     ("image/class/label", int64_feature(label, packed=bool(i % 2))),
                     ("image/height", int64_feature(24, packed=False)),
                     ("image/bbox", float_feature(0.5, 0.25)),
                     ("image/encoded", bytes_feature(jpeg(path)))]
            if i % 3 == 0:
                feats.reverse()  # fields in any order
            f.write(record(example(feats)))
            if i == 1:
                f.write(record(example([("image/encoded", bytes_feature(jpeg(path)))])))
                f.write(record(example([("image/class/label", int64_feature(1))])))
                f.write(record(example([("image/encoded", bytes_feature(jpeg(path))),
                                        ("image/class/label", bytes_feature(b"1"))])))
                f.write(record(b"\x0a\x05\x0a\x03"))  # a length past its message
                f.write(record(example([("image/encoded", bytes_feature(notjpeg)),
                                        ("image/class/label", int64_feature(0))])))
                f.write(record(example([("image/encoded", bytes_feature(cut(path))),
                                        ("image/class/label", int64_feature(0))])))

# ---- other keys ---------------------------------------------------------------------------
os.makedirs(os.path.join(out, "custom"))
with open(os.path.join(out, "custom", "a.tfrecord"), "wb") as f:
    for label, path in samples:
        f.write(record(example([("img", bytes_feature(jpeg(path))), ("y", int64_feature(label))])))
with tarfile.open(os.path.join(out, "custom", "a.tar"), "w") as tf:  # pax format
    for i, (label, path) in enumerate(samples):
        add(tf, "k%03d.jpg" % i, notjpeg)  # not the image: --image-key jpeg
        add(tf, "k%03d.jpeg" % i, jpeg(path))
        add(tf, "k%03d.json" % i, json.dumps({"y": label, "label": 99}).encode())
EOF
python3 "$T/make_shards.py" "$T/sh" "$T/folder" "$T/notjpeg.bin" || fail "making the shards"
NS=21 # samples in the folder
WDS=("$T/sh/wds/shard-00000.tar" "$T/sh/wds/shard-00001.tar")
TFR=("$T/sh/tfr/data.tfrecord-00000-of-00002" "$T/sh/tfr/data.tfrecord-00001-of-00002")

# ---- byte-identical to the ImageFolder's pack --------------------------------------------
for mode in restart no-restart raw; do
    case $mode in restart) opt=() ;; no-restart) opt=(--no-restart) ;; raw) opt=(--raw --max-side 32) ;; esac
    run "$MK" --image-only "${opt[@]}" "$T/folder" "$T/folder-$mode.bfs"
    expect_rc 0 "packing the folder ($mode)"
    run "$MK" --image-only "${opt[@]}" "${WDS[@]}" "$T/wds-$mode.bfs"
    expect_rc 0 "packing the tar shards ($mode)"
    same "$T/folder-$mode.bfs" "$T/wds-$mode.bfs" "WebDataset pack ($mode)"
    run "$MK" --image-only "${opt[@]}" "${TFR[@]}" "$T/tfr-$mode.bfs"
    expect_rc 0 "packing the TFRecord files ($mode)"
    same "$T/folder-$mode.bfs" "$T/tfr-$mode.bfs" "TFRecord pack ($mode)"
done
ok "WebDataset and TFRecord packs are byte-identical to the ImageFolder's (restart, no-restart, raw)"

"$MK" --info "$T/wds-restart.bfs" >"$T/info"
grep -q "^samples: *$NS (" "$T/info" || fail "--info: sample count"
grep -q "^    2        7  2$" "$T/info" || fail "--info: class 2 named '2' with 7 samples"

# ---- skip accounting ---------------------------------------------------------------------
run "$MK" --image-only --jobs 3 "${WDS[@]}" "$T/w.bfs"
expect_rc 0 "packing the tar shards"
expect_err "skipped 16 of 37 samples:" "WebDataset skip count"
for s in 0 1; do
    S=${WDS[$s]}
    expect_err "$S:skip/nolabel$s: no label (no .cls member, no .json member)" "no label"
    expect_err "$S:skip/noimage$s: no image (no .jpg or .jpeg member)" "no image"
    expect_err "$S:skip/notjpeg$s: not a JPEG" "not a JPEG"
    expect_err "$S:skip/badcls$s: bad .cls (not a decimal integer)" "bad .cls"
    expect_err "$S:skip/badjson$s: bad .json" "bad .json"
    expect_err "$S:skip/floatlabel$s: the .json's label is not an integer" "float label"
    expect_err "$S:skip/range$s: label out of range" "negative label"
    expect_err "$S:skip/cut$s: corrupt JPEG data (Premature end of JPEG file)" "a JPEG cut short"
done
expect_err "note: 1 tar members have no WebDataset key" "the README member"
expect_err "packed $NS samples in 3 classes" "summary"
expect_err "read 2 WebDataset shards" "shard count"
run "$MK" --image-only "${TFR[@]}" "$T/t.bfs"
expect_rc 0 "packing the TFRecord files"
expect_err "skipped 12 of 33 samples:" "TFRecord skip count"
for s in 0 1; do
    S=${TFR[$s]}
    expect_err "$S:record 2: no label (the --label-key feature is absent or empty)" "no label"
    expect_err "$S:record 3: no image (the --image-key feature is absent or empty)" "no image"
    expect_err "$S:record 4: the label feature is not one int64 value" "bytes label"
    expect_err "$S:record 5: not a tf.train.Example" "not an Example"
    expect_err "$S:record 6: not a JPEG" "not a JPEG"
    expect_err "$S:record 7: corrupt JPEG data (Premature end of JPEG file)" "a JPEG cut short"
done
run "$MK" --image-only --strict "${TFR[@]}" "$T/strict.bfs"
expect_rc 1 "--strict with samples to skip"
expect_err "${TFR[0]}:record 2: no label" "--strict names the sample"
[ ! -e "$T/strict.bfs" ] || fail "--strict left $T/strict.bfs"
ok "skipped samples counted and listed with their reasons (16 tar, 12 TFRecord); --strict"

# ---- determinism; directories, globs, order by name --------------------------------------
run "$MK" --image-only --jobs 1 "${WDS[@]}" "$T/w1.bfs"
same "$T/w.bfs" "$T/w1.bfs" "WebDataset pack with --jobs 1 and 3"
run "$MK" --image-only --jobs 2 "${WDS[1]}" "${WDS[0]}" "$T/w2.bfs" # sorted by name, whatever the order
same "$T/w.bfs" "$T/w2.bfs" "shards given in reverse order"
run "$MK" --image-only "$T/sh/wds" "$T/w3.bfs"
expect_rc 0 "a directory of tar shards"
same "$T/w.bfs" "$T/w3.bfs" "a directory of tar shards"
run "$MK" --image-only "$T/sh/wds/shard-*.tar" "$T/w4.bfs"
expect_rc 0 "a glob of tar shards"
same "$T/w.bfs" "$T/w4.bfs" "a glob of tar shards"
run "$MK" --image-only --jobs 1 "$T/sh/tfr" "$T/t1.bfs"
expect_rc 0 "a directory of TFRecord files"
same "$T/t.bfs" "$T/t1.bfs" "TFRecord pack from a directory, --jobs 1"
cp "${TFR[0]}" "$T/train-0"
cp "${TFR[1]}" "$T/train-1"
run "$MK" --image-only --format tfrecord "$T/train-1" "$T/train-0" "$T/t2.bfs"
expect_rc 0 "--format tfrecord with other names"
same "$T/t.bfs" "$T/t2.bfs" "--format tfrecord"
# TensorFlow's own names (train-00000-of-00002) in a directory: --format takes every file
mkdir "$T/tfnames"
cp "${TFR[0]}" "$T/tfnames/train-00000-of-00002"
cp "${TFR[1]}" "$T/tfnames/train-00001-of-00002"
run "$MK" --image-only --format tfrecord "$T/tfnames" "$T/t3.bfs"
expect_rc 0 "--format tfrecord with a directory of train-0000N-of-00002"
same "$T/t.bfs" "$T/t3.bfs" "--format tfrecord, a directory of TensorFlow's names"
# ...but only the shards when some files have a shard name (tensorflow_datasets keeps
# dataset_info.json beside data.tfrecord-00000-of-00002)
cp -r "$T/sh/tfr" "$T/tfds"
echo '{"name": "x"}' >"$T/tfds/dataset_info.json"
run "$MK" --image-only --format tfrecord "$T/tfds" "$T/t4.bfs"
expect_rc 0 "--format tfrecord with a tensorflow_datasets directory"
same "$T/t.bfs" "$T/t4.bfs" "--format tfrecord, named shards beside a .json"
ok "packs are deterministic (jobs, argument order, directory, glob, --format); --format takes a directory's files whatever their names"

# ---- other keys ----------------------------------------------------------------------------
run "$MK" --image-only --image-key img --label-key y "$T/sh/custom/a.tfrecord" "$T/c1.bfs"
expect_rc 0 "TFRecord with --image-key img --label-key y"
same "$T/folder-restart.bfs" "$T/c1.bfs" "TFRecord with other keys"
run "$MK" --image-only --image-key jpeg --label-key y "$T/sh/custom/a.tar" "$T/c2.bfs"
expect_rc 0 "WebDataset with --image-key jpeg --label-key y"
same "$T/folder-restart.bfs" "$T/c2.bfs" "WebDataset with other keys (pax headers)"
run "$MK" --image-only "$T/sh/custom/a.tfrecord" "$T/c3.bfs"
expect_rc 1 "TFRecord without its keys"
expect_err "no sample could be packed ($NS samples in 1 shard, all skipped)" "nothing packed"
[ ! -e "$T/c3.bfs" ] || fail "a failed pack left $T/c3.bfs"
ok "--image-key and --label-key for both formats"

# ---- malformed shards: the file and the byte ------------------------------------------------
size=$(stat -c %s "${WDS[0]}")
head -c 2100 "${WDS[0]}" >"$T/cut.tar"
run "$MK" --image-only "$T/cut.tar" "$T/x.bfs"
expect_rc 1 "a truncated tar"
expect_err "$T/cut.tar: truncated: the stream ends at byte 2100, inside member" "truncated tar"
head -c $((size / 512 / 2 * 512)) "${WDS[0]}" >"$T/cut2.tar"
run "$MK" --image-only "$T/cut2.tar" "$T/x.bfs"
expect_rc 1 "a tar cut at a block boundary"
expect_err "$T/cut2.tar: truncated" "tar cut at a block"
cp "${WDS[1]}" "$T/flip.tar"
printf 'X' | dd of="$T/flip.tar" bs=1 seek=20 conv=notrunc status=none # in the first name
run "$MK" --image-only "$T/flip.tar" "$T/x.bfs"
expect_rc 1 "a tar with a bad header"
expect_err "$T/flip.tar: not a tar file (bad header checksum at byte 0)" "bad tar header"
cp "${TFR[1]}" "$T/flip.tfrecord"
printf 'X' | dd of="$T/flip.tfrecord" bs=1 seek=200 conv=notrunc status=none # record 0 data
run "$MK" --image-only "$T/flip.tfrecord" "$T/x.bfs"
expect_rc 1 "a TFRecord with a bad data CRC"
expect_err "$T/flip.tfrecord: record 0 at byte 0: bad data checksum (CRC-32C mismatch)" "bad CRC"
r0=$(python3 -c 'import struct,sys; print(struct.unpack("<Q", open(sys.argv[1],"rb").read(8))[0] + 16)' "${TFR[1]}")
cp "${TFR[1]}" "$T/flip2.tfrecord"
printf '\377' | dd of="$T/flip2.tfrecord" bs=1 seek=$((r0 + 3)) conv=notrunc status=none
run "$MK" --image-only "$T/flip2.tfrecord" "$T/x.bfs"
expect_rc 1 "a TFRecord with a bad length CRC"
expect_err "$T/flip2.tfrecord: record 1 at byte $r0: bad length checksum" "bad length CRC"
head -c $((r0 + 100)) "${TFR[1]}" >"$T/cut.tfrecord"
run "$MK" --image-only "$T/cut.tfrecord" "$T/x.bfs"
expect_rc 1 "a truncated TFRecord"
expect_err "$T/cut.tfrecord: truncated: the stream ends at byte $((r0 + 100)), inside record 1 (from byte $r0)" "truncated TFRecord"
ls "$T"/x.bfs* >/dev/null 2>&1 && fail "a failed pack left a file: $(ls "$T"/x.bfs*)"
ok "truncated and corrupt tars, TFRecord CRC mismatches and truncation: file and byte named"

# ---- compressed TFRecords (TFRecordOptions compression_type GZIP, ZLIB) --------------------
# told by their bytes, whatever their names; packs byte-identical to the plain files'
zlib_c() { python3 -c 'import sys, zlib; sys.stdout.buffer.write(zlib.compress(open(sys.argv[1], "rb").read()))' "$1"; }
mkdir "$T/gz" "$T/zl" "$T/mixed"
for s in 0 1; do
    gzip -c -n "${TFR[$s]}" >"$T/gz/train.tfrecord-0000$s-of-00002"
    zlib_c "${TFR[$s]}" >"$T/zl/train.tfrecord-0000$s-of-00002"
done
cp "$T/gz/train.tfrecord-00000-of-00002" "$T/mixed/train-00000-of-00002" # TensorFlow's names
cp "${TFR[1]}" "$T/mixed/train-00001-of-00002"                            # a plain one
for d in gz zl; do
    for mode in restart raw; do
        case $mode in restart) opt=() ref=$T/t.bfs ;; raw) opt=(--raw --max-side 32) ref=$T/tfr-raw-check.bfs ;; esac
        [ "$mode" = restart ] || [ -e "$ref" ] || "$MK" --image-only --quiet "${opt[@]}" "${TFR[@]}" "$ref"
        run "$MK" --image-only "${opt[@]}" "$T/$d" "$T/$d-$mode.bfs"
        expect_rc 0 "packing $d-compressed TFRecords ($mode)"
        expect_err "skipped 12 of 33 samples:" "$d-compressed TFRecords: the same samples skipped"
        same "$ref" "$T/$d-$mode.bfs" "$d-compressed TFRecords ($mode)"
    done
done
run "$MK" --image-only --format tfrecord "$T/mixed" "$T/mixed.bfs"
expect_rc 0 "a GZIP and a plain TFRecord named train-0000N-of-00002"
same "$T/t.bfs" "$T/mixed.bfs" "GZIP and plain TFRecords together"
G=$T/gz/train.tfrecord-00000-of-00002
gsize=$(stat -c %s "$G")
head -c $((gsize - 100)) "$G" >"$T/cut.gz.tfrecord"
run "$MK" --image-only "$T/cut.gz.tfrecord" "$T/x.bfs"
expect_rc 1 "a GZIP TFRecord cut short"
expect_err "$T/cut.gz.tfrecord: truncated: the file ends at byte $((gsize - 100)), inside its GZIP stream" "a GZIP TFRecord cut short"
head -c 40 "$G" >"$T/cut2.gz.tfrecord"
run "$MK" --image-only "$T/cut2.gz.tfrecord" "$T/x.bfs"
expect_rc 1 "a GZIP TFRecord cut in its first block"
expect_err "$T/cut2.gz.tfrecord: truncated: the file ends at byte 40, inside its GZIP stream" "a GZIP TFRecord cut in its first block"
zl=$T/zl/train.tfrecord-00001-of-00002
head -c $(($(stat -c %s "$zl") - 1)) "$zl" >"$T/cut.zl.tfrecord" # its Adler-32 cut
run "$MK" --image-only "$T/cut.zl.tfrecord" "$T/x.bfs"
expect_rc 1 "a ZLIB TFRecord without its last byte"
expect_err "inside its ZLIB stream" "a ZLIB TFRecord without its last byte"
cp "$G" "$T/bad.gz.tfrecord"
printf '\377\377\377\377' | dd of="$T/bad.gz.tfrecord" bs=1 seek=$((gsize - 8)) conv=notrunc status=none
run "$MK" --image-only "$T/bad.gz.tfrecord" "$T/x.bfs"
expect_rc 1 "a GZIP TFRecord with a bad CRC-32"
expect_err "$T/bad.gz.tfrecord: GZIP data corrupt at byte" "a GZIP TFRecord with a bad CRC-32"
expect_err "incorrect data check" "a GZIP TFRecord with a bad CRC-32"
{ cat "$G"; echo junk; } >"$T/junk.gz.tfrecord"
run "$MK" --image-only "$T/junk.gz.tfrecord" "$T/x.bfs"
expect_rc 1 "a GZIP TFRecord followed by junk"
expect_err "$T/junk.gz.tfrecord: GZIP data corrupt at byte $((gsize + 2)) (in what follows the stream's end at byte $gsize): incorrect header check" "junk after a GZIP stream"
ls "$T"/x.bfs* >/dev/null 2>&1 && fail "a failed pack left a file: $(ls "$T"/x.bfs*)"
ok "GZIP and ZLIB TFRecords (any name) pack byte-identical to the plain ones; cut short, a bad CRC-32, junk after the stream: file and byte named"

# ---- usage ----------------------------------------------------------------------------------
run "$MK" --image-only --format parquet "${WDS[@]}" "$T/x.bfs"
expect_rc 2 "--format parquet"
expect_err "is not webdataset, tfrecord or manifest" "--format parquet"
run "$MK" --image-only "${WDS[0]}" "${TFR[0]}" "$T/x.bfs"
expect_rc 1 "tar and TFRecord shards together"
expect_err "give one format" "mixed formats"
run "$MK" --image-only "${WDS[0]}" "${WDS[0]}" "$T/x.bfs"
expect_rc 1 "a shard given twice"
expect_err "given twice" "a shard twice"
run "$MK" --image-only "$T/sh/wds/nothing-*.tar" "$T/x.bfs"
expect_rc 1 "a glob matching nothing"
expect_err "no file matches" "empty glob"
run "$MK" --label-key y "$T/folder" "$T/x.bfs"
expect_rc 1 "--label-key with an ImageFolder"
expect_err "the image and label keys do not apply" "--label-key with a folder"
run "$MK" --image-only --format webdataset "$T/folder" "$T/x.bfs"
expect_rc 1 "--format webdataset with an ImageFolder"
expect_err "holds no WebDataset (.tar) shards" "--format with a folder"
run "$MK" --image-only "$T/folder" "${WDS[0]}" "$T/x.bfs"
expect_rc 1 "a folder among shards"
expect_err "$T/folder: a directory without .tar or TFRecord files" "folder among shards"
run "$MK" --tokens u16 --doc-sep 0 --format tfrecord "${TFR[0]}" "$T/x.bfs"
expect_rc 2 "--tokens with --format"
ok "usage errors: format name, mixed formats, duplicates, empty glob, keys and formats that do not apply"
