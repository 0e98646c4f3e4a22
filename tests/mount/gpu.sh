#!/usr/bin/env bash
# tests/mount/gpu.sh — libbatchfs-gpu over a real mount (build/tests/gpu_tool):
#   1. the CPU fallback delivers every batch of rank 1 of 2 for epochs 1..2, in order,
#      with the bytes of the mount's files (gpu_tool files computes them from the files);
#   2. with the suite's fake CUDA driver, each copy path over the mount: copy=staging
#      (pinned staging, one host copy per batch), copy=register (the file's read-only
#      mapping registered, no host copy: the files of a batchfs mount cannot shrink, which
#      the loader knows from statfs (FUSE) and the root's user.batchfs.fingerprint xattr)
#      and copy=auto (stages every batch; times both paths on the first, for the stats): the same
#      bytes each time, also with readers=3 threads reading each staged batch;
#   3. dtype=f32,layout=nchw over a u8 mount equals a dtype=f32,layout=nchw mount of the
#      same dataset, byte for byte (the device kernel's emulation in the fake driver and
#      the daemon's own conversion);
#   4. a directory that is not a mount, even with the root's xattr copied: copy=register
#      is refused with a reason (a plain file may shrink under a mapping: SIGBUS), auto
#      uses staging;
#   5. a token mount (pack=bucket: batch files of several sizes and shapes): the CPU path
#      and each copy path on the fake driver (depth 1: one slot, grown) give the files'
#      tensors, in data order;
#   6. copy=pool over a mount with gpu_pool_mb= (under passthrough): the pool file is
#      registered once for every batch, no host copy, and each batch is copied from its
#      window while its file is held open (the lease). The fake driver runs the copies
#      from registered memory late, when an event recorded after them is synchronized
#      (FAKE_CUDA_DEFER=1); the consumer keeps 8 batches before reading each back (lag=8)
#      and the pool is the smallest the daemon takes, so the daemon reuses windows long
#      before those copies run: a loader that let go of a batch file before its copy's
#      event gets other bytes (seen: 40 of 42 batches differed with the lease dropped at
#      once); here the leases outgrow the pool and the loader stages what finds no window.
#      auto takes the pool too, and where the pool cannot be used (no read-only host
#      registration, FAKE_CUDA_RO_REGISTER=0; its registration failing) stages and says why
#      in bfsg_get_stats' fallback; copy=pool on a mount without one is refused with the
#      reason.
# Run: BUILD=build bash tests/mount/gpu.sh (tests/run.sh does). About 5 s.
. "$(dirname "$0")/lib.sh"
require_fuse
TOOL=$BUILD/tests/gpu_tool
PYTHON3=$(command -v python3)
FAKE=$BUILD/tests/fakecuda/libcuda.so.1 # lib.sh made $BUILD absolute
[ -x "$TOOL" ] && [ -f "$FAKE" ] || fail "gpu_tool or the fake driver not built (make all-tests)"

"$GEN" "$T/images" 3 10 40 120 3 # 30 images: 7 batches of 4
"$MKBATCHFS" --quiet "$T/images" "$T/data.bfs"
M=$T/mnt F=$T/mntf
mkdir "$M" "$F"
mount_bfs "$T/data.bfs" "$M" -o batch=4,size=24x20,epochs=3
mount_bfs "$T/data.bfs" "$F" -o batch=4,size=24x20,epochs=3,dtype=f32,layout=nchw

"$TOOL" files "$M" 1 3 1 2 >"$T/want" || fail "gpu_tool files"
[ "$(wc -l <"$T/want")" = 6 ] || fail "expected 6 batches of rank 1 of 2 (7 per epoch, 3 each), got $(wc -l <"$T/want")"
"$TOOL" read "$M" device=cpu rank=1 world=2 epoch_begin=1 >"$T/got" || fail "gpu_tool read (cpu)"
cmp <(grep -v ^stats "$T/got") "$T/want" || fail "CPU fallback bytes differ from the files: $(diff <(grep -v ^stats "$T/got") "$T/want" | head -3)"
grep -q "^stats device=cpu copy=read batches=6 host_copies=6" "$T/got" || fail "cpu stats: $(grep ^stats "$T/got")"
ok "CPU fallback: rank 1 of 2, epochs 1-2, in order, the files' bytes"

"$TOOL" files "$M" 0 3 >"$T/want_all"
for copy in staging register auto; do
    "$TOOL" read "$M" device=cuda cuda_library="$FAKE" copy=$copy >"$T/got_$copy" 2>"$T/err" ||
        fail "copy=$copy: $(cat "$T/err")"
    cmp <(grep -v ^stats "$T/got_$copy") "$T/want_all" || fail "copy=$copy: device bytes differ from the files"
done
# several threads read each staged batch (readers=3: shares of >= 2 MiB of 19 MB batches)
"$TOOL" read "$M" device=cuda cuda_library="$FAKE" copy=staging readers=3 >"$T/got_r3" 2>"$T/err" ||
    fail "readers=3: $(cat "$T/err")"
cmp <(grep -v ^stats "$T/got_r3") "$T/want_all" || fail "readers=3: device bytes differ from the files"
if "$TOOL" read "$M" device=cuda cuda_library="$FAKE" readers=17 >/dev/null 2>"$T/err"; then
    fail "readers=17 accepted"
fi
grep -q "readers=17: expected 1..16" "$T/err" || fail "readers=17: $(cat "$T/err")"
grep -q "copy=staging batches=21 host_copies=21 registered=0 staged=21" "$T/got_staging" ||
    fail "staging stats: $(grep ^stats "$T/got_staging")"
grep -q "copy=register batches=21 host_copies=0 registered=21 staged=0" "$T/got_register" ||
    fail "register stats: $(grep ^stats "$T/got_register")"
s=$(grep ^stats "$T/got_auto")
case $s in
*"copy=staging "*"registered=0 staged=21 "*) ;;
*) fail "copy=auto: expected every batch staged: $s" ;;
esac
echo "$s" | grep -Eq 'staging_ns_per_mb=[1-9][0-9]* register_ns_per_mb=[1-9]' || fail "copy=auto timings missing: $s"
ok "fake CUDA over the mount: staging, register (0 host copies) and auto ($(echo "$s" | grep -o 'copy=[a-z]*')) give the files' bytes"

"$TOOL" files "$F" 0 1 >"$T/want_f32"
"$TOOL" read "$M" device=cuda cuda_library="$FAKE" dtype=f32 layout=nchw epoch_end=1 >"$T/got_f32" ||
    fail "dtype=f32 on the device"
cmp <(grep -v ^stats "$T/got_f32") "$T/want_f32" ||
    fail "device conversion differs from the daemon's dtype=f32,layout=nchw: $(diff <(grep -v ^stats "$T/got_f32") "$T/want_f32" | head -2)"
"$TOOL" read "$M" device=cpu dtype=f32 layout=nchw epoch_end=1 | grep -v ^stats |
    cmp - "$T/want_f32" || fail "host conversion differs from the daemon's"
ok "dtype=f32,layout=nchw on the device and on the host equal a dtype=f32,layout=nchw mount"

mkdir -p "$T/copy/epoch"
cp -r "$M/epoch/0" "$T/copy/epoch/"
rc=0
"$TOOL" read "$T/copy" device=cuda cuda_library="$FAKE" copy=register >/dev/null 2>"$T/err" || rc=$?
[ $rc = 1 ] && grep -q "copy=register: only for a batchfs mount" "$T/err" || fail "copy=register on a copy: rc=$rc $(cat "$T/err")"
"$TOOL" read "$T/copy" device=cuda cuda_library="$FAKE" >"$T/got_copy" || fail "auto on a copy"
grep -q "copy=staging batches=7 host_copies=7 registered=0" "$T/got_copy" || fail "auto on a copy: $(grep ^stats "$T/got_copy")"
"$PYTHON3" -c 'import os, sys; os.setxattr(sys.argv[1], "user.batchfs.fingerprint", b"0123456789abcdef")' "$T/copy" 2>/dev/null &&
    { "$TOOL" read "$T/copy" device=cuda cuda_library="$FAKE" copy=register >/dev/null 2>&1 &&
        fail "a copy that kept the root's xattr was registered: it is not a FUSE mount"; }
ok "a copy of the tree: copy=register refused with the reason (also with the root's xattr copied), auto stages"
# 5. token batches of several shapes over a mount
"$PYTHON3" -c 'import random, struct, sys
r = random.Random(4); out = []
for _ in range(90):
    out += [r.randrange(50000) for _ in range(r.choice([r.randrange(15), r.randrange(15, 63), r.randrange(63, 299)]))] + [50256]
open(sys.argv[1], "wb").write(struct.pack("<%dH" % len(out), *out))' "$T/train.bin"
"$MKBATCHFS" --tokens u16 --doc-sep 50256 "$T/train.bin" "$T/tok.bfs" >/dev/null 2>&1 || fail "mkbatchfs --tokens"
K=$T/mntk
mkdir "$K"
mount_bfs "$T/tok.bfs" "$K" -o pack=bucket,buckets=16:64:300,batch_tokens=600,drop_last=0,epochs=2
"$TOOL" files "$K" 0 2 >"$T/want_tok" || fail "gpu_tool files (tokens)"
shapes=$(grep -o 'tokens:i32:\[[0-9,]*\]' "$T/want_tok" | sort -u | wc -l)
[ "$shapes" -ge 3 ] || fail "expected token batches of several shapes, got $shapes"
grep -q '^0 0 lengths:i64:\[[0-9]*\]:[0-9a-f]* indices:i64:.* tokens:i32:.* mask:u8:' "$T/want_tok" ||
    fail "token batch tensors not in data order: $(head -1 "$T/want_tok")"
"$TOOL" read "$K" device=cpu >"$T/got_tok" || fail "gpu_tool read (tokens, cpu)"
cmp <(grep -v ^stats "$T/got_tok") "$T/want_tok" || fail "tokens on the CPU differ from the files"
for copy in staging register auto; do
    "$TOOL" read "$K" device=cuda cuda_library="$FAKE" copy=$copy depth=1 >"$T/got_tok_$copy" 2>"$T/err" ||
        fail "tokens copy=$copy: $(cat "$T/err")"
    cmp <(grep -v ^stats "$T/got_tok_$copy") "$T/want_tok" || fail "tokens copy=$copy: device bytes differ from the files"
done
ok "token mount (pack=bucket, $shapes shapes): CPU, staging, register, auto at depth 1 give the files' tensors"
# 6. the pool file: registered once, each batch from its window under its open file
"$GEN" "$T/pimages" 4 30 60 120 3 # 120 images: 7 batches of 16 (~197 KB each)
"$MKBATCHFS" --quiet "$T/pimages" "$T/pool.bfs"
P=$T/mntp
mkdir "$P"
mount_bfs "$T/pool.bfs" "$P" -o batch=16,size=64,epochs=6,threads=1,gpu_pool_mb=1
if [ "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pool"]["served"])' "$P/stats")" = True ]; then
    "$TOOL" files "$P" 0 6 >"$T/want_pool" || fail "gpu_tool files (pool)"
    for copy in pool auto; do
        FAKE_CUDA_DEFER=1 "$TOOL" read "$P" device=cuda cuda_library="$FAKE" copy=$copy >"$T/got_pool" 2>"$T/err" ||
            fail "copy=$copy over a pool: $(cat "$T/err")"
        cmp <(grep -v ^stats "$T/got_pool") "$T/want_pool" ||
            fail "copy=$copy: device bytes differ from the files ($(diff <(grep -v ^stats "$T/got_pool") "$T/want_pool" | grep -c '^<') batches): a window changed before its copy ran"
        s=$(grep ^stats "$T/got_pool")
        case $s in
        *"copy=pool batches=42 host_copies=0 registered=0 staged=0 "*"pooled=42 pool_staged=0 register_calls=1 registered_live=0 deferred="[1-9]*) ;;
        *) fail "copy=$copy over a pool: $s" ;;
        esac
    done
    # auto where the pool cannot be used stages, and says why in bfsg_get_stats' fallback:
    # no read-only host registration (attribute 113), or the pool's registration failed
    "$TOOL" files "$P" 0 1 >"$T/want_pool1" || fail "gpu_tool files (pool, epoch 0)"
    for knob in FAKE_CUDA_RO_REGISTER=0 FAKE_CUDA_FAIL=cuMemHostRegister_v2:1; do
        env "$knob" "$TOOL" read "$P" device=cuda cuda_library="$FAKE" copy=auto epoch_end=1 >"$T/got_nopool" 2>"$T/err" ||
            fail "copy=auto, $knob: $(cat "$T/err")"
        cmp <(grep -v ^stats "$T/got_nopool") "$T/want_pool1" || fail "copy=auto, $knob: device bytes differ from the files"
        case $knob in
        *RO_REGISTER*) why="the device does not support read-only host registration (attribute 113)" ;;
        *) why="cuMemHostRegister of $P/.pool" ;;
        esac
        grep -q "^stats .* pooled=0 " "$T/got_nopool" || fail "copy=auto, $knob: $(grep ^stats "$T/got_nopool")"
        grep -qF "fallback: copy=auto: the mount's pool file not used: $why" "$T/err" ||
            fail "copy=auto, $knob: the fallback does not say '$why': $(cat "$T/err")"
    done
    ok "copy=auto where the pool cannot be registered: staged, and fallback says why"
    w=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pool"]["windows"])' "$P/stats")
    [ "$w" -ge 84 ] || fail "the daemon named $w windows for 84 batches"
    FAKE_CUDA_DEFER=1 "$TOOL" read "$P" lag=8 device=cuda cuda_library="$FAKE" copy=pool >"$T/got_lag" 2>"$T/err" ||
        fail "copy=pool lag=8: $(cat "$T/err")"
    cmp <(grep -v ^stats "$T/got_lag") "$T/want_pool" ||
        fail "copy=pool with batches kept: $(diff <(grep -v ^stats "$T/got_lag") "$T/want_pool" | grep -c '^<') batches differ: a window changed before its copy ran"
    s=$(grep ^stats "$T/got_lag")
    pooled=$(echo "$s" | grep -o ' pooled=[0-9]*' | cut -d= -f2) staged=$(echo "$s" | grep -o ' pool_staged=[0-9]*' | cut -d= -f2)
    [ "$pooled" -ge 5 ] && [ "$staged" -ge 1 ] && [ $((pooled + staged)) = 42 ] || fail "copy=pool lag=8: $s"
    ok "leases held across late copies: with 8 batches kept and the smallest pool, every batch's bytes ($pooled from their windows, $staged staged: no window was free)"
    rc=0
    "$TOOL" read "$M" device=cuda cuda_library="$FAKE" copy=pool >/dev/null 2>"$T/err" || rc=$?
    [ $rc = 1 ] && grep -q "copy=pool: .* offers no pool file (mount it with -o gpu_pool_mb=N" "$T/err" ||
        fail "copy=pool without a pool: rc=$rc $(cat "$T/err")"
    ok "copy=pool (and auto) over gpu_pool_mb=1: 42 batches, one registration, no host copy, the files' bytes with late copies; refused where the mount has no pool"
else
    ok "no FUSE passthrough here: no pool file to test copy=pool with"
fi
echo "PASS: gpu"
