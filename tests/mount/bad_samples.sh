#!/usr/bin/env bash
# tests/mount/bad_samples.sh — an ImageFolder with one truncated JPEG (sample 21,
# class_001/img_00005.jpg, cut 40 bytes into its scan).
#  - bad_sample=substitute (default): every batch of two epochs is served; the batch that
#    held sample 21 holds a substitute in that one slot (its index and label: provenance)
#    and equals the intact dataset's batch elsewhere; the other batches equal the intact
#    dataset's; a remount serves the same bytes; /stats counts bad_samples; the daemon log
#    names the file, once.
#  - bad_sample=fail: reading the batch holding it fails with EIO (cat exits non-zero,
#    again on a retry); every other batch reads fine; /stats counts the failure; the log
#    names the sample.
#  - PNG and WebP: a truncated file of each substituted, or failing its batch (EIO).
# 64 images, batch=8, size=32. A few seconds.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/good" 4 16 64 200 4
cp -a "$T/good" "$T/bad"
BAD=21 BADFILE=class_001/img_00005.jpg # index = class 1 * 16 + 5
python3 - "$T/bad/$BADFILE" <<'EOF'
import sys
d = open(sys.argv[1], "rb").read()
sos = d.find(b"\xff\xda")
assert sos > 0, "no SOS marker"
open(sys.argv[1], "wb").write(d[:sos + 40])
EOF
OPTS=batch=8,size=32
NB=8
M=$T/mnt
mkdir "$M" "$T/good_ref" "$T/sub" "$T/out"
re_file=${BADFILE//./\\.}
expect_log "^batchfs: bad sample $BAD \\(.*/$re_file\\): .*; substituted by sample [0-9]+ \\(bad_sample=substitute\\)$"
expect_log "^batchfs: bad sample $BAD \\(.*/$re_file\\): .*; failing epoch [01] batch [0-9]+ \\(bad_sample=fail\\)$"

# the intact dataset's batches (same plan: the plan depends only on the sample count)
for e in 0 1; do
    for k in $(seq 0 $((NB - 1))); do ref_batch "$T/good" "$OPTS" $e $k "$T/good_ref/e${e}_b$k"; done
done
# KBAD[e]: the batch of epoch e that holds sample 21
KBAD=()
for e in 0 1; do
    KBAD[e]=$(pyx -c '
import sys, bfs
for k in range(int(sys.argv[3])):
    if int(sys.argv[2]) in bfs.i64(bfs.tensors("%s/e%s_b%d" % (sys.argv[1], sys.argv[4], k))[0]["indices"][2]):
        print(k)' "$T/good_ref" "$BAD" "$NB" "$e")
    [ -n "${KBAD[e]}" ] || fail "sample $BAD is in no batch of epoch $e"
done
echo "   sample $BAD ($BADFILE) is in epoch 0 batch ${KBAD[0]}, epoch 1 batch ${KBAD[1]}"

# ---- substitute -------------------------------------------------------------------------
mount_bfs "$T/bad" "$M" -o "$OPTS,epochs=2"
for e in 0 1; do
    for k in $(seq 0 $((NB - 1))); do
        cat "$M/epoch/$e/batch_$k" >"$T/sub/e${e}_b$k" || fail "substitute: epoch $e batch $k: read failed"
        [ "$(stat -c %s "$T/sub/e${e}_b$k")" = "$(stat -c %s "$M/epoch/$e/batch_$k")" ] ||
            fail "substitute: epoch $e batch $k: short read"
    done
done
pyx - "$M" "$T/sub" "$T/good_ref" "$BAD" "$NB" "${KBAD[0]}" "${KBAD[1]}" <<'EOF' || fail "substitute checks"
import sys, bfs
m, sub, good, bad, nb = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
kbad = [int(sys.argv[6]), int(sys.argv[7])]
st = bfs.stats(m)
if st["bad_samples"] < 1:
    sys.exit("/stats bad_samples = %d after reading the batch with the bad sample" % st["bad_samples"])
if st["batches"]["failed"] or st["reads"]["errors"]:
    sys.exit("/stats shows failures under bad_sample=substitute: %s" % st["batches"])
for e in (0, 1):
    for k in range(nb):
        s, _ = bfs.tensors("%s/e%d_b%d" % (sub, e, k))
        g, _ = bfs.tensors("%s/e%d_b%d" % (good, e, k))
        si, gi = bfs.i64(s["indices"][2]), bfs.i64(g["indices"][2])
        sl = bfs.i64(s["labels"][2])
        if bad in si:
            sys.exit("epoch %d batch %d still lists the bad sample %d" % (e, k, bad))
        if [l for l, i in zip(sl, si) if l != i // 16]:
            sys.exit("epoch %d batch %d: labels %s do not match indices %s" % (e, k, sl, si))
        if k != kbad[e]:
            if s["images"] != g["images"] or si != gi:
                sys.exit("epoch %d batch %d (no bad sample) differs from the intact dataset's" % (e, k))
            continue
        diff = [j for j in range(len(si)) if si[j] != gi[j]]
        if diff != [gi.index(bad)]:
            sys.exit("epoch %d batch %d: slots %s differ, expected only slot %d (the bad sample)"
                     % (e, k, diff, gi.index(bad)))
        si_img, gi_img = s["images"][2], g["images"][2]
        one = len(si_img) // len(si)
        j = diff[0]
        if si_img[:j * one] != gi_img[:j * one] or si_img[(j + 1) * one:] != gi_img[(j + 1) * one:] \
           or si_img[j * one:(j + 1) * one] == gi_img[j * one:(j + 1) * one]:
            sys.exit("epoch %d batch %d: images differ outside the bad slot, or not in it" % (e, k))
        print("   epoch %d batch %d slot %d: sample %d replaced by sample %d" % (e, k, j, bad, si[j]))
EOF
grep -c "bad sample $BAD " "$DAEMON_LOG" | grep -qx 1 || fail "the daemon log should name sample $BAD once: $(cat "$DAEMON_LOG")"
grep -q "$BADFILE" "$DAEMON_LOG" || fail "the daemon log does not name $BADFILE"
unmount_bfs "$M"
mount_bfs "$T/bad" "$M" -o "$OPTS,epochs=2"
for e in 0 1; do
    cmp "$M/epoch/$e/batch_${KBAD[e]}" "$T/sub/e${e}_b${KBAD[e]}" || fail "substitute: a remount serves other bytes"
done
ref_batch "$T/bad" "$OPTS" 1 "${KBAD[1]}" "$T/out/ref_bad" 2>"$T/out/engine_tool.err" # it logs the bad sample too
cmp "$T/out/ref_bad" "$T/sub/e1_b${KBAD[1]}" || fail "substitute: the mount differs from engine_tool"
unmount_bfs "$M"
ok "substitute: every batch served; the bad slot substituted (index and label), the rest intact; deterministic; counted; logged"

# ---- fail ---------------------------------------------------------------------------------
mount_bfs "$T/bad" "$M" -o "$OPTS,epochs=2,bad_sample=fail"
for e in 0 1; do
    for k in $(seq 0 $((NB - 1))); do
        f=$M/epoch/$e/batch_$k
        if [ "$k" = "${KBAD[e]}" ]; then
            for try in 1 2; do
                if cat "$f" >"$T/out/x" 2>"$T/out/err"; then fail "bad_sample=fail: epoch $e batch $k read without error (try $try)"; fi
                grep -q "Input/output error" "$T/out/err" || fail "bad_sample=fail: cat of $f: $(cat "$T/out/err"), expected EIO"
            done
            pyx -c '
import errno, sys
try:
    open(sys.argv[1], "rb").read()
except OSError as e:
    sys.exit(0 if e.errno == errno.EIO else "errno %s" % errno.errorcode[e.errno])
sys.exit("read succeeded")' "$f" || fail "bad_sample=fail: Python read of $f should fail with EIO"
        else
            cat "$f" >"$T/out/x" || fail "bad_sample=fail: epoch $e batch $k (no bad sample) failed"
            pyx -c '
import sys, bfs
a, b = bfs.tensors(sys.argv[1])[0], bfs.tensors(sys.argv[2])[0]
sys.exit(any(a[n] != b[n] for n in a))' "$T/out/x" "$T/sub/e${e}_b$k" ||
                fail "bad_sample=fail: epoch $e batch $k tensors differ from bad_sample=substitute's"
        fi
    done
done
pyx - "$M" <<'EOF' || fail "bad_sample=fail /stats"
import sys, bfs
st = bfs.stats(sys.argv[1])
if st["batches"]["failed"] < 2 or st["reads"]["errors"] < 2 or st["bad_samples"] < 1:
    sys.exit("/stats after 2 failed batches: batches %s reads %s bad_samples %s"
             % (st["batches"], st["reads"], st["bad_samples"]))
EOF
grep -q "bad sample $BAD (.*$BADFILE).*failing epoch 0 batch ${KBAD[0]}" "$DAEMON_LOG" ||
    fail "bad_sample=fail: the log does not name sample $BAD for epoch 0 batch ${KBAD[0]}"
unmount_bfs "$M"
ok "fail: EIO for the 2 batches holding sample $BAD (cat, retry, Python); 14 others read fine; counted; logged"

# ---- PNG and WebP -------------------------------------------------------------------------
# 12 samples (shuffle=none, batch=4): sample 1 a truncated WebP (batch 0), sample 6 a
# truncated PNG (batch 1); batch 2 intact. Substituted as JPEGs are, or EIO with
# bad_sample=fail; the log names the files.
need_py
mkdir "$T/codec"
"$PY" - "$T/good" "$T/codec" <<'EOF2'
import os, sys
from PIL import Image
src, dst = sys.argv[1:]
for c in ("class_000", "class_001"):
    os.makedirs(os.path.join(dst, c))
    for i, f in enumerate(sorted(os.listdir(os.path.join(src, c)))[:6]):
        im = Image.open(os.path.join(src, c, f)).convert("RGB")
        ext = "webp" if i % 2 else "png"
        out = os.path.join(dst, c, "%d.%s" % (i, ext))
        im.save(out)
        if (c, i) in (("class_000", 1), ("class_001", 0)):
            d = open(out, "rb").read()
            open(out, "wb").write(d[: len(d) * 2 // 3])
EOF2
COPTS=batch=4,size=24,shuffle=none
expect_log "^batchfs: bad sample 1 \\(.*/class_000/1\\.webp\\): corrupt or truncated WebP; substituted by sample [0-9]+ \\(bad_sample=substitute\\)$"
expect_log "^batchfs: bad sample 6 \\(.*/class_001/0\\.png\\): corrupt or truncated PNG; substituted by sample [0-9]+ \\(bad_sample=substitute\\)$"
expect_log "^batchfs: bad sample 1 \\(.*/class_000/1\\.webp\\): corrupt or truncated WebP; failing epoch 0 batch 0 \\(bad_sample=fail\\)$"
expect_log "^batchfs: bad sample 6 \\(.*/class_001/0\\.png\\): corrupt or truncated PNG; failing epoch 0 batch 1 \\(bad_sample=fail\\)$"
mount_bfs "$T/codec" "$M" -o "$COPTS"
for k in 0 1 2; do
    cat "$M/epoch/0/batch_$k" >"$T/out/c$k" || fail "PNG/WebP substitute: batch $k: read failed"
done
pyx - "$M" "$T/out" <<'EOF2' || fail "PNG/WebP substitute checks"
import sys, bfs
st = bfs.stats(sys.argv[1])
if st["bad_samples"] != 2:
    sys.exit("/stats bad_samples = %d, expected 2" % st["bad_samples"])
for k, bad in ((0, 1), (1, 6), (2, None)):
    ix = bfs.i64(bfs.tensors("%s/c%d" % (sys.argv[2], k))[0]["indices"][2])
    # every slot its own sample but the bad one's, which holds a substitute
    if any((ix[j] == 4 * k + j) == (4 * k + j == bad) for j in range(4)):
        sys.exit("batch %d holds %s" % (k, ix))
EOF2
unmount_bfs "$M"
mount_bfs "$T/codec" "$M" -o "$COPTS,bad_sample=fail"
for k in 0 1; do
    if cat "$M/epoch/0/batch_$k" >"$T/out/x" 2>"$T/out/err"; then fail "PNG/WebP bad_sample=fail: batch $k read"; fi
    grep -q "Input/output error" "$T/out/err" || fail "PNG/WebP bad_sample=fail: batch $k: $(cat "$T/out/err")"
done
cat "$M/epoch/0/batch_2" >"$T/out/x" || fail "PNG/WebP bad_sample=fail: batch 2 (intact) failed"
pyx -c '
import sys, bfs
a, b = bfs.tensors(sys.argv[1])[0], bfs.tensors(sys.argv[2])[0]
sys.exit(any(a[n] != b[n] for n in a))' "$T/out/x" "$T/out/c2" ||
    fail "PNG/WebP bad_sample=fail: batch 2 tensors differ from bad_sample=substitute's"
unmount_bfs "$M"
ok "PNG and WebP: a truncated file of each substituted (counted, logged) or failing its batch with EIO"
