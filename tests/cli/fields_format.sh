#!/usr/bin/env bash
# tests/cli/fields_format.sh — .bfs version 3 as docs/format.md writes it: a file written
# by tests/bfsfile.py (pure Python, from the document alone) passes mkbatchfs --verify;
# mkbatchfs --tokenize adds SentencePiece ids equal to spm_encode's (Debian's
# sentencepiece tools train the model here), keeps every other value, and its output is
# byte for byte the file bfsfile.py writes for the same records; what --tokenize
# refuses, it refuses with a message naming the problem, writing nothing.
. "$(dirname "$0")/lib.sh" fields_format
source tests/pyenv.sh
command -v spm_train >/dev/null || fail "spm_train missing: apt-get install sentencepiece (make deps)"

cat >"$T/caps.txt" <<'TXT'
a red fox jumps over the lazy dog
the quick brown fox
café au lait ☕ and a croissant
zebras and giraffes on the savanna at dusk
two dogs playing with a frisbee in the park
TXT
for _ in $(seq 40); do cat "$T/caps.txt"; done >"$T/train.txt"
(cd "$T" && spm_train --input=train.txt --model_prefix=m --vocab_size=48 \
    --model_type=unigram >spm.log 2>&1) || fail "spm_train: $(tail -3 "$T/spm.log")"

# the source: a small JPEG, a caption, boxes with a class each, a fixed 3-vector, an
# optional JSON; one caption empty, one JSON absent
"$PY" - "$T" <<'PY'
import io, json, sys
from PIL import Image
sys.path.insert(0, "tests")
import bfsfile
t = sys.argv[1]


def jpeg(i):
    b = io.BytesIO()
    Image.new("RGB", (10 + i, 20), (30 * i, 100, 200)).save(b, "JPEG", quality=90)
    return b.getvalue()


caps = open(f"{t}/caps.txt", encoding="utf-8").read().splitlines() + [""]
fields = [dict(name="jpg", kind="image"), dict(name="caption", kind="text", flags=1),
          dict(name="boxes", kind="boxes", dtype="f32", flags=1, shape=(4,)),
          dict(name="box_classes", kind="array", dtype="i64", flags=1, follows=2),
          dict(name="emb", kind="array", dtype="f32", shape=(3,)),
          dict(name="meta", kind="bytes", flags=3)]
recs = []
for i, c in enumerate(caps):
    n = i % 3
    recs.append((i % 2, [dict(data=jpeg(i), width=10 + i, height=20),
                         c.encode(), [float(v) for v in range(4 * n)], list(range(n)),
                         [i, i + 0.5, -i], None if i == 2 else json.dumps({"i": i}).encode()]))
bfsfile.write_v3(f"{t}/src.bfs", fields, ["cat", "dog"], recs)
json.dump(caps, open(f"{t}/caps.json", "w"))
PY
run "$MK" --verify "$T/src.bfs"
expect_rc 0 "mkbatchfs --verify of the file bfsfile.py wrote from docs/format.md"
ok "a version 3 file written from docs/format.md alone passes mkbatchfs --verify"

run "$MK" --tokenize caption="$T/m.model:bos:eos" "$T/src.bfs" "$T/tok.bfs"
expect_rc 0 "mkbatchfs --tokenize"
expect_err "tokenized field caption of 6 samples into field caption_tokens (u16, vocabulary 48)" \
    "the tokenize report"
spm_encode --model="$T/m.model" --output_format=id <"$T/caps.txt" >"$T/ids.txt"
"$PY" - "$T" <<'PY' || fail "the tokenized file differs from the reference"
import json, sys
sys.path.insert(0, "tests")
import bfsfile
t = sys.argv[1]
v0, f0, c0, r0 = bfsfile.read(f"{t}/src.bfs")
v1, f1, c1, r1 = bfsfile.read(f"{t}/tok.bfs")
assert v1 == 3 and c1 == c0 and [f["name"] for f in f1] == [f["name"] for f in f0] + ["caption_tokens"]
assert f1[-1]["kind"] == "tokens" and f1[-1]["dtype"] == "u16" and f1[-1]["flags"] == 1
ids = [[int(x) for x in line.split()] for line in open(f"{t}/ids.txt").read().splitlines()]
ids.append([])  # the empty caption
for i, ((l0, a), (l1, b)) in enumerate(zip(r0, r1)):
    assert l0 == l1 and b[:-1] == a, i
    assert b[-1] == [1] + ids[i] + [2], (i, b[-1], ids[i])  # bos 1, eos 2
# the C writer's bytes are the document's: the same records through bfsfile.py
recs = [(l, v) for l, v in r1]
for _, v in recs:
    v[0] = dict(data=v[0]["data"], width=v[0]["width"], height=v[0]["height"], flags=v[0]["flags"])
fields = [dict(name=f["name"], kind=f["kind"], dtype=f["dtype"], flags=f["flags"], shape=f["shape"],
               follows=f["follows"]) for f in f1]
bfsfile.write_v3(f"{t}/again.bfs", fields, c1, recs)
assert open(f"{t}/again.bfs", "rb").read() == open(f"{t}/tok.bfs", "rb").read(), "bytes differ"
print("ok - ids equal spm_encode's with bos/eos, every other value kept, bytes equal bfsfile.py's")
PY

run "$MK" --tokenize title="$T/m.model" "$T/src.bfs" "$T/x.bfs"
expect_rc 1 "--tokenize of a field that is not there"
expect_err 'no text field "title" (its text fields: caption)' "the text fields named"
run "$MK" --tokenize caption="$T/none.model" "$T/src.bfs" "$T/x.bfs"
expect_rc 2 "--tokenize with a missing model"
expect_err "none.model: cannot read the model" "the model named"
echo "not a model" >"$T/bad.model"
run "$MK" --tokenize caption="$T/bad.model" "$T/src.bfs" "$T/x.bfs"
expect_rc 2 "--tokenize with a file that is not a model"
expect_err "bad.model: not a SentencePiece model" "the model named"
run "$MK" --tokenize caption "$T/src.bfs" "$T/x.bfs"
expect_rc 2 "--tokenize without =MODEL"
run "$MK" --tokenize caption="$T/m.model" --tokens u16 --doc-sep 0 "$T/src.bfs" "$T/x.bfs"
expect_rc 2 "--tokenize with --tokens"
[ ! -e "$T/x.bfs" ] && [ -z "$(ls "$T" | grep -e '\.tmp-' -e untokenized || true)" ] ||
    fail "a refused --tokenize left files behind: $(ls "$T")"
"$GEN" "$T/if" 2 2 16 24 >/dev/null
run "$MK" --quiet --tokenize caption="$T/m.model" "$T/if" "$T/x.bfs"
expect_rc 1 "--tokenize of an ImageFolder (version 1: no captions)"
expect_err "version 1 has no text fields" "why"
[ ! -e "$T/x.bfs" ] && [ -z "$(ls "$T" | grep untokenized || true)" ] || fail "left files: $(ls "$T")"
ok "--tokenize refuses a missing field, a missing or bad model, bad usage and a source without captions"

# a re-pack of a multi-field .bfs keeps every value: byte for byte the same file; a
# corrupt value leaves its sample out, listed (--strict fails); --max-side refused
run "$MK" --quiet "$T/src.bfs" "$T/re.bfs"
expect_rc 0 "re-pack of a version 3 file"
cmp -s "$T/src.bfs" "$T/re.bfs" || fail "a re-pack of a multi-field .bfs is not the same file"
"$PY" - "$T" <<'PY'
import struct, sys
sys.path.insert(0, "tests")
import bfsfile
t = sys.argv[1]
d = bytearray(open(f"{t}/src.bfs", "rb").read())
st, rs, heap = struct.unpack_from("<Q", d, 56)[0], struct.unpack_from("<I", d, 108)[0], struct.unpack_from("<Q", d, 32)[0]
off, ln = struct.unpack_from("<QI", d, st + 2 * rs + 32)  # sample 2's caption
d[heap + off] ^= 0x20
open(f"{t}/bad.bfs", "wb").write(d)
PY
run "$MK" "$T/bad.bfs" "$T/re2.bfs"
expect_rc 0 "re-pack with a corrupt caption"
expect_err "bad.bfs[2]: field caption: sample checksum mismatch" "the corrupt sample listed"
"$PY" - "$T" <<'PY' || fail "the re-pack did not keep the other samples"
import sys
sys.path.insert(0, "tests")
import bfsfile
t = sys.argv[1]
_, _, _, a = bfsfile.read(f"{t}/src.bfs")
_, _, _, b = bfsfile.read(f"{t}/re2.bfs")
assert b == a[:2] + a[3:], "samples other than 2 changed"
PY
run "$MK" --strict "$T/bad.bfs" "$T/re3.bfs"
expect_rc 1 "--strict re-pack with a corrupt caption"
expect_err "bad.bfs[2]: field caption: sample checksum mismatch (file corrupt) (--strict)" "--strict names it"
run "$MK" --max-side 8 "$T/src.bfs" "$T/re3.bfs"
expect_rc 1 "--max-side on a multi-field re-pack"
expect_err "re-packed value by value, as it is: --max-side and --raw apply" "why"
[ ! -e "$T/re3.bfs" ] || fail "a refused re-pack left $T/re3.bfs"
ok "a multi-field re-pack keeps every value (the same file), leaves out and lists a corrupt sample"
