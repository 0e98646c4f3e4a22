#!/usr/bin/env bash
# tests/mount/options.sh — everything a user can get wrong on the command line is refused
# before mounting: a non-zero exit, one message naming the option, file or directory, and
# nothing mounted or left running afterwards. Bad options; -o spec=FILE (comments,
# relative path, -o after it overrides it) gives the same /pipeline as the same options
# in -o; missing spec file; spec files with a NUL byte, FIFOs (no hang), directories,
# devices, over 1 MiB; bad mountpoints (missing, a file, not empty, already mounted);
# /dev/fuse that the user (nobody) may not open: a hint about permission, not the module;
# bad sources (missing, corrupt .bfs header or tables, truncated .bfs, empty folder);
# batches too large for ram_mb, the machine or a (fake) cgroup memory.max, a cache_mb
# smaller than one batch, and the cgroup limit lowering the default RAM budget.
# About 5 s.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/images" 3 8 48 120 2 # 24 images
"$MKBATCHFS" --quiet "$T/images" "$T/data.bfs"
M=$T/mnt
mkdir "$M"
# a daemon that wrongly mounts and daemonizes (no -f below) is found and unmounted at exit
MOUNTS+=("$M") DAEMONS+=("") LOGS+=("$T/unused.log")

# refused SOURCE MNT ARGS... -- TEXT...: batchfs must exit non-zero (not by a signal or a
# hang) with every TEXT in its stderr, mount nothing at MNT and leave no daemon.
refused() {
    local src=$1 mnt=$2 args=() rc=0
    shift 2
    while [ "$1" != -- ]; do args+=("$1") && shift; done
    shift
    (cd "$T" && timeout 20 "$BATCHFS" "$src" "$mnt" "${args[@]}") >"$T/out" 2>"$T/err" || rc=$?
    local what="batchfs $src $mnt ${args[*]}"
    [ $rc -ne 0 ] || fail "$what: exit status 0, expected a refusal"
    [ $rc -ne 124 ] || fail "$what: still running after 20 s"
    [ $rc -lt 128 ] || fail "$what: killed by signal $((rc - 128))"
    local t
    for t in "$@"; do
        grep -qF -- "$t" "$T/err" || { cat "$T/err" >&2; fail "$what: stderr does not mention '$t'"; }
    done
    [ "$(wc -l <"$T/err")" -le 2 ] || { cat "$T/err" >&2; fail "$what: more than a short message"; }
    if is_mounted "$mnt"; then fail "$what: refused, yet $mnt is mounted"; fi
    if pgrep -f -- "$BATCHFS $src $mnt" >/dev/null; then fail "$what: a daemon is left running"; fi
    echo "ok - refused (exit $rc): ${args[*]:-$src $mnt}: $(head -c 150 "$T/err" | head -n 1)"
}

# ---- bad options ------------------------------------------------------------------------
refused "$T/data.bfs" "$M" -o batch=0 -- "batch=0" "1..65536"
refused "$T/data.bfs" "$M" -o batch=8,shuffle=random -- "shuffle=random" "full|pages|none"
refused "$T/data.bfs" "$M" -o size=0 -- "size=0"
refused "$T/data.bfs" "$M" -o unknown=1 -- "unknown option 'unknown'"
refused "$T/data.bfs" "$M" -o bach=8 -- "unknown option 'bach'" "did you mean 'batch'"
refused "$T/data.bfs" "$M" -o shard=2/2 -- "shard=2/2" "I < N"
refused "$T/data.bfs" "$M" -o dtype=u8,normalize=imagenet -- "normalize=imagenet" "dtype=u8"
refused "$T/data.bfs" "$M" -o batch=8,drop_last -- "drop_last"
refused "$T/data.bfs" "$M" -o batch=8,fuse_threads=0 -- "fuse_threads=0"
refused "$T/data.bfs" "$M" -o batch=8,passthrough=on -- "passthrough=on" "auto or off"
refused "$T/data.bfs" "$M" -o batch=8 -o size=1e3 -- "size=1e3"
refused "$T/data.bfs" "$M" -o batch=25 -- "batch=25" "24 samples"
refused "$T/data.bfs" "$M" -o batch=8 --frobnicate -- "--frobnicate"
refused "$T/data.bfs" "$M" -o -- "-o needs a value"
refused "$T/data.bfs" "$M" -o batch=8,cache_dir=relative/dir -- "cache_dir"
touch "$T/not-a-dir"
refused "$T/data.bfs" "$M" -o batch=8,cache_dir="$T/not-a-dir" -- "cache_dir"

# ---- memory: batches that cannot fit are refused at mount, not by the OOM killer --------
# A fake cgroup v2 tree (BATCHFS_CGROUP_ROOT, engine/ram.h's test hook): an 8 GiB
# memory.max on whatever path /proc/self/cgroup names (the walk up ends at this root).
mkdir "$T/cg"
echo 8589934592 >"$T/cg/memory.max"
echo 1073741824 >"$T/cg/memory.current" # 1 GiB used: the default budget is 3.5 GiB
export BATCHFS_CGROUP_ROOT=$T/cg
refused "$T/data.bfs" "$M" -o batch=16,size=8192,dtype=f32 -- \
    "batch=16,size=8192,dtype=f32 makes 12.9 GB batch files" "8 GiB (cgroup memory.max)" \
    "lower batch or size"
refused "$T/data.bfs" "$M" -o batch=16,size=8192,dtype=f32,ram_mb=1000000 -- \
    "12.9 GB batch files" "cgroup memory.max"
refused "$T/data.bfs" "$M" -o batch=16,size=4096,dtype=f32 -- "3.2 GB batch files" \
    "at most 3584 MiB (ram_mb's default: half of the 7 GiB that cgroup memory.max 8 GiB leaves)" \
    "raise ram_mb"
mount_bfs "$T/data.bfs" "$M" -o batch=8,size=16
grep -q '"ram_budget_bytes": 3758096384,' "$M/stats" ||
    fail "8 GiB cgroup with 1 GiB used: the default RAM budget should be 3.5 GiB: $(grep -o '"ram_budget_bytes": [0-9]*' "$M/stats")"
cmp <(cat "$M/epoch/0/batch_1") <(ref_batch "$T/data.bfs" batch=8,size=16 0 1 /dev/stdout) ||
    fail "under the fake cgroup: batch 1 differs from engine_tool's"
unmount_bfs "$M"
unset BATCHFS_CGROUP_ROOT
ok "cgroup memory.max: too-large batches refused with the options named, the default budget halved room"
# ram_mb smaller than two 100 MB batches, on any machine
refused "$T/data.bfs" "$M" -o batch=8,size=1024,dtype=f32,ram_mb=64 -- \
    "batch=8,size=1024,dtype=f32 makes 100.7 MB batch files" "at most ram_mb=64 MiB" "raise ram_mb"
mount_bfs "$T/data.bfs" "$M" -o batch=8,size=16
grep -q '"ram_budget_bytes": [1-9]' "$M/stats" || fail "default mount: no RAM budget in /stats"
unmount_bfs "$M"
ok "ram_mb below what two batches need is refused; the default mount still works"
# cache_mb smaller than one 6.3 MB batch keeps nothing: refused, naming the batch size and
# the least value; that value mounts and serves the batch engine_tool computes
refused "$T/data.bfs" "$M" -o batch=8,size=256,dtype=f32,cache_mb=4 -- \
    "batch=8,size=256,dtype=f32 makes 6.3 MB batch files" "cache_mb=4 MiB cannot hold one" \
    "raise cache_mb (to 7 at least)"
mount_bfs "$T/data.bfs" "$M" -o batch=8,size=256,dtype=f32,cache_mb=7
cmp <(cat "$M/epoch/0/batch_1") <(ref_batch "$T/data.bfs" batch=8,size=256,dtype=f32 0 1 /dev/stdout) ||
    fail "cache_mb=7: batch 1 differs from engine_tool's"
unmount_bfs "$M"
ok "cache_mb below one batch is refused; one batch's worth mounts"

# ---- /dev/fuse that this user may not open: the hint is about permission, not the module.
# Run as user nobody (root only, with setpriv), where /dev/fuse's mode keeps nobody out;
# the other reasons are checked on files of their own by tests/check_device.c.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
    as_nobody() { setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups "$@"; }
    if as_nobody sh -c 'exec 9<>/dev/fuse' 2>/dev/null; then
        echo "ok - skipped: user nobody may open /dev/fuse here ($(stat -c '%A %U:%G' /dev/fuse))"
    else
        chmod 711 "$T" && chmod 644 "$T/data.bfs"
        mkdir "$T/nobody-mnt" && chown nobody "$T/nobody-mnt"
        rc=0
        as_nobody timeout 20 "$BATCHFS" "$T/data.bfs" "$T/nobody-mnt" -o batch=8 \
            >"$T/out" 2>"$T/err" || rc=$?
        [ $rc = 1 ] || { cat "$T/err" >&2; fail "as nobody without access to /dev/fuse: exit $rc, expected 1"; }
        grep -qF "batchfs: /dev/fuse: Permission denied ($(stat -c %A /dev/fuse) " "$T/err" &&
            grep -qE "user nobody \(uid [0-9]+\) (may not open it|is not in group)" "$T/err" ||
            { cat "$T/err" >&2; fail "as nobody: the message does not name the permission"; }
        if grep -qi "modprobe\|module" "$T/err"; then
            cat "$T/err" >&2
            fail "as nobody: a permission problem is blamed on the fuse module"
        fi
        if is_mounted "$T/nobody-mnt"; then fail "as nobody: refused, yet mounted"; fi
        ok "as nobody without access to /dev/fuse: $(head -c 200 "$T/err")"
    fi
fi

# ---- in the background (no -f): the command returns once the kernel's INIT is answered,
# with what the daemon says until then on its stderr; FUSE options such as max_read work
rc=0
MOUNTS+=("$M") DAEMONS+=("") LOGS+=("") # (unmounted by the cleanup if a check fails)
(cd "$T" && timeout 20 "$BATCHFS" "$T/data.bfs" "$M" -o batch=8,max_read=131072 \
    -o huge_pages=1,passthrough=off) >"$T/out" 2>"$T/err" || rc=$?
[ $rc = 0 ] || { cat "$T/err" >&2; fail "background mount with max_read=131072: exit $rc"; }
is_mounted "$M" || fail "background mount: exit 0 but $M is not mounted"
cmp <(cat "$M/epoch/0/batch_2") <(ref_batch "$T/data.bfs" batch=8 0 2 /dev/stdout) ||
    fail "background mount with max_read: batch 2 differs from engine_tool's"
grep -q "note: huge_pages=1 has no effect" "$T/err" ||
    { cat "$T/err" >&2; fail "background mount: the note from INIT did not reach the terminal"; }
fusermount3 -u "$M"
for _ in $(seq 100); do pgrep -f -- "$BATCHFS $T/data.bfs $M" >/dev/null || break; sleep 0.1; done
if pgrep -f -- "$BATCHFS $T/data.bfs $M" >/dev/null; then fail "background daemon still running after unmount"; fi
ok "background mount: exit 0 once INIT is answered, notes on stderr, max_read=131072 works"

# ---- spec files ---------------------------------------------------------------------------
printf '%s\n' "# a spec file: key = value lines" "" "seed = 7" \
    "batch = 6        # per GPU" "  size = 20x28" "shuffle=pages" "augment = eval" \
    "dtype = f16   # normalize = imagenet by default for floats" "layout = nchw" \
    "epochs = 4" "threads = 1" >"$T/train.spec"
mount_bfs "$T/data.bfs" "$M" -o spec=train.spec # relative to the daemon's working directory
cp "$M/pipeline" "$T/pipeline.spec"
ls "$M/epoch/0" >"$T/ls.spec"
cat "$M/epoch/1/batch_3" >"$T/b.spec"
unmount_bfs "$M"
mount_bfs "$T/data.bfs" "$M" -o seed=7,batch=6,size=20x28,shuffle=pages,augment=eval \
    -o dtype=f16,layout=nchw,epochs=4,threads=2
cmp "$T/pipeline.spec" "$M/pipeline" || { diff "$T/pipeline.spec" "$M/pipeline" >&2; fail "/pipeline of spec=FILE differs from the same options in -o"; }
cmp "$T/b.spec" "$M/epoch/1/batch_3" || fail "batch 3 of epoch 1 differs between spec=FILE and -o"
[ "$(ls "$M/epoch/0")" = "$(cat "$T/ls.spec")" ] || fail "epoch/0 lists differently"
grep -qx "batch = 6" "$M/pipeline" && grep -qx "dtype = f16" "$M/pipeline" &&
    grep -qx "normalize = 0.485,0.456,0.406/0.229,0.224,0.225" "$M/pipeline" ||
    fail "/pipeline does not show the spec's options: $(cat "$M/pipeline")"
unmount_bfs "$M"
mount_bfs "$T/data.bfs" "$M" -o "spec=$T/train.spec,batch=4"
grep -qx "batch = 4" "$M/pipeline" && grep -qx "seed = 7" "$M/pipeline" ||
    fail "-o spec=FILE,batch=4: the later batch=4 should win: $(cat "$M/pipeline")"
[ -f "$M/epoch/0/batch_5" ] || fail "-o spec=FILE,batch=4: 24 samples give 6 batches"
unmount_bfs "$M"
ok "spec=FILE (comments, blank lines, relative path) == the same -o: /pipeline, listing, bytes; a later -o wins"

# MNT/pipeline is itself a spec file: its source line is ignored, its fingerprint checked
mount_bfs "$T/data.bfs" "$M" -o "spec=$T/pipeline.spec,threads=2"
cmp "$T/pipeline.spec" "$M/pipeline" || fail "spec=<a copy of MNT/pipeline> gives another /pipeline"
cmp "$T/b.spec" "$M/epoch/1/batch_3" || fail "spec=<a copy of MNT/pipeline>: batch 3 of epoch 1 differs"
unmount_bfs "$M"
refused "$T/data.bfs" "$M" -o "spec=$T/pipeline.spec,seed=8" -- "fingerprint" "remove the fingerprint line"
refused "$T/images" "$M" -o "spec=$T/pipeline.spec" -- "fingerprint" "another dataset"
sed 's/^fingerprint = .*/fingerprint = 12345/' "$T/pipeline.spec" >"$T/fp.spec"
refused "$T/data.bfs" "$M" -o "spec=$T/fp.spec" -- "fp.spec:" "16 hex digits"
ok "MNT/pipeline as spec=FILE reproduces the pipeline; its fingerprint refuses other data or options"

printf 'batch = 8\nsize = 32\nshuffle random\n' >"$T/bad.spec"
refused "$T/data.bfs" "$M" -o "spec=$T/bad.spec" -- "bad.spec:3:" "shuffle random"
printf 'batch = 8\nbatch_size = 32\n' >"$T/bad2.spec"
refused "$T/data.bfs" "$M" -o "spec=$T/bad2.spec" -- "bad2.spec:2" "batch_size"
refused "$T/data.bfs" "$M" -o "spec=$T/missing.spec" -- "spec=$T/missing.spec" "No such file"
refused "$T/data.bfs" "$M" -o spec= -- "spec=FILE"
# a NUL byte used to end the text there: the rest of the line, and every line after it
# (an unknown key included), was silently ignored
printf 'batch = 8\nsize = 32\0 # rest\nunknown_key = 1\n' >"$T/nul.spec"
refused "$T/data.bfs" "$M" -o "spec=$T/nul.spec" -- "nul.spec:2:10:" "NUL byte"
# spec= naming a FIFO with no writer used to block in open() forever; a directory or a
# device is refused by kind too (refused() gives up after 20 s: a hang fails, never stalls)
mkfifo "$T/fifo.spec"
refused "$T/data.bfs" "$M" -o "spec=$T/fifo.spec" -- "spec=$T/fifo.spec" "FIFO" "regular file"
refused "$T/data.bfs" "$M" -o "spec=$T" -- "spec=$T: is a directory" "regular file"
refused "$T/data.bfs" "$M" -o spec=/dev/zero -- "spec=/dev/zero: is a character device"
head -c $((1024 * 1024 + 1)) /dev/zero | tr '\0' '#' >"$T/big.spec"
refused "$T/data.bfs" "$M" -o "spec=$T/big.spec" -- "big.spec" "larger than 1048576 bytes"
ok "spec files: NUL bytes refused with line and column; FIFOs, directories, devices and files over 1 MiB refused"

# ---- mountpoints ---------------------------------------------------------------------------
refused "$T/data.bfs" "$T/nowhere" -o batch=8 -- "$T/nowhere" "No such file" "mkdir"
touch "$T/afile"
refused "$T/data.bfs" "$T/afile" -o batch=8 -- "$T/afile" "not a directory"
mkdir "$T/full" && touch "$T/full/keep.txt"
refused "$T/data.bfs" "$T/full" -o batch=8 -- "$T/full" "not empty"
[ -f "$T/full/keep.txt" ] || fail "the non-empty mountpoint lost its file"
mount_bfs "$T/data.bfs" "$M" -o batch=8,size=16
first=$DAEMON_PID
rc=0
(cd "$T" && timeout 20 "$BATCHFS" "$T/data.bfs" "$M" -o batch=4) 2>"$T/err" || rc=$?
[ $rc -ne 0 ] && [ $rc -lt 124 ] || fail "a second batchfs on a mounted $M: exit $rc"
grep -qF "$M" "$T/err" && grep -qiE "busy|already mounted" "$T/err" ||
    { cat "$T/err" >&2; fail "a second mount on $M: no clear message"; }
[ "$(grep -c " $M fuse.batchfs " /proc/self/mounts)" = 1 ] || fail "$M is mounted twice"
grep -qx "batch = 8" "$M/pipeline" && cat "$M/epoch/0/batch_2" >/dev/null ||
    fail "the first mount no longer works after a refused second mount"
kill -0 "$first" || fail "the first daemon died"
echo "ok - refused (exit $rc): a mounted mountpoint: $(head -n 1 "$T/err")"
unmount_bfs "$M"

# ---- sources -----------------------------------------------------------------------------
refused "$T/missing.bfs" "$M" -o batch=8 -- "$T/missing.bfs" "No such file"
flip_byte() { # FILE OFFSET: invert one byte in place
    local b
    b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    printf "$(printf '\\%03o' $((b ^ 0xff)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
cp "$T/data.bfs" "$T/corrupt.bfs" && flip_byte "$T/corrupt.bfs" 16 # sample_count
refused "$T/corrupt.bfs" "$M" -o batch=8 -- "$T/corrupt.bfs" "checksum"
# one label in the sample table (no per-sample checksum covers it: the tables' checksum does)
table=$(od -An -tu8 -j 56 -N8 "$T/data.bfs" | tr -d ' ')
cp "$T/data.bfs" "$T/label.bfs" && flip_byte "$T/label.bfs" $((table + 32 * 3 + 12))
refused "$T/label.bfs" "$M" -o batch=8 -- "$T/label.bfs" "table checksum" "mkbatchfs --verify"
cp "$T/data.bfs" "$T/magic.bfs" && flip_byte "$T/magic.bfs" 1
refused "$T/magic.bfs" "$M" -o batch=8 -- "$T/magic.bfs" "not a batchfs dataset"
head -c 6000 "$T/data.bfs" >"$T/short.bfs"
refused "$T/short.bfs" "$M" -o batch=8 -- "$T/short.bfs" "truncated"
mkdir "$T/empty"
refused "$T/empty" "$M" -o batch=8 -- "$T/empty" "class"
rc=0
"$BATCHFS" "$T/data.bfs" 2>"$T/err" || rc=$?
[ $rc -ne 0 ] && grep -q "SOURCE and MOUNTPOINT" "$T/err" || fail "batchfs SOURCE (no MOUNTPOINT): exit $rc, $(cat "$T/err")"
ok "refused: batchfs SOURCE without a MOUNTPOINT"

# ---- after all that, a good mount still works on the same mountpoint ------------------------
mount_bfs "$T/data.bfs" "$M" -o batch=8,size=16
cmp <(cat "$M/epoch/0/batch_1") <(ref_batch "$T/data.bfs" batch=8,size=16 0 1 /dev/stdout) ||
    fail "batch 1 differs from engine_tool's"
unmount_bfs "$M"
ok "the mountpoint is usable after the refusals"
