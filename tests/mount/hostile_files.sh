#!/usr/bin/env bash
# tests/mount/hostile_files.sh — files in a dataset that are not what they claim, and a
# dataset changed under a mount:
#  - an ImageFolder holding a FIFO named *.jpg and a dangling *.jpg symlink mounts; every
#    batch is served (each within 20 s: a FIFO opened for reading would block for good,
#    its reader in D state) with the two samples substituted and logged by name;
#    mkbatchfs packs the same folder, skipping both with their reasons;
#  - a sub-directory nobody can list (run as an unprivileged user: root reads anything)
#    is skipped with a note by mkbatchfs and by the engine's folder source, not a refusal;
#  - a mounted .bfs overwritten in place (cp over it: truncate, then write) fails the
#    batches computed afterwards with EIO and one log line; the daemon stays up (/stats
#    answers) and exits cleanly; batches read before still come from its memory.
# 64 images (+2), batch=6, size=32. A few seconds.
. "$(dirname "$0")/lib.sh"
require_fuse

OPTS=batch=6,size=32
"$GEN" "$T/src" 4 16 64 200 4
mkfifo "$T/src/class_000/zz_fifo.jpg"
ln -s "$T/nowhere.jpg" "$T/src/class_002/zz_dangling.jpg"
M=$T/mnt
mkdir "$M"

# ---- FIFO and dangling symlink in a mounted folder ------------------------------------
expect_log '^batchfs: bad sample [0-9]+ \(.*/zz_fifo\.jpg\): not a regular file .*; substituted by sample [0-9]+ \(bad_sample=substitute\)$'
expect_log '^batchfs: bad sample [0-9]+ \(.*/zz_dangling\.jpg\): No such file or directory; substituted by sample [0-9]+ \(bad_sample=substitute\)$'
mount_bfs "$T/src" "$M" -o "$OPTS"
nb=$(ls "$M/epoch/0" | grep -c '^batch_')
[ "$nb" = 11 ] || fail "66 samples at batch=6 should make 11 batches, the mount lists $nb"
for k in $(seq 0 $((nb - 1))); do
    timeout 20 cat "$M/epoch/0/batch_$k" >"$T/b$k" || fail "epoch 0 batch $k: read failed or hung"
done
pyx - "$M" <<'EOF' || fail "/stats after the hostile folder"
import sys, bfs
st = bfs.stats(sys.argv[1])
if st["bad_samples"] != 2:
    sys.exit("/stats bad_samples = %d, want 2 (the FIFO and the dangling symlink)" % st["bad_samples"])
if st["batches"]["failed"]:
    sys.exit("batches failed under bad_sample=substitute: %s" % st["batches"])
EOF
grep -q 'zz_fifo\.jpg.*not a regular file' "$DAEMON_LOG" || fail "the log does not name the FIFO"
grep -q 'zz_dangling\.jpg' "$DAEMON_LOG" || fail "the log does not name the dangling symlink"
unmount_bfs "$M"
ok "FIFO and dangling symlink in a folder: substituted, logged, nothing hangs"

timeout 60 "$MKBATCHFS" "$T/src" "$T/packed.bfs" 2>"$T/pack.err" ||
    { cat "$T/pack.err"; fail "mkbatchfs on the hostile folder failed or hung"; }
grep -q 'zz_fifo\.jpg.*not a regular file' "$T/pack.err" || { cat "$T/pack.err"; fail "mkbatchfs does not list the FIFO"; }
grep -q 'zz_dangling\.jpg.*No such file' "$T/pack.err" || { cat "$T/pack.err"; fail "mkbatchfs does not list the dangling symlink"; }
"$MKBATCHFS" --info "$T/packed.bfs" | grep -q '^samples: *64 ' ||
    { "$MKBATCHFS" --info "$T/packed.bfs"; fail "the pack should hold the 64 real images"; }
ok "mkbatchfs skips the FIFO and the dangling symlink with their reasons"

# ---- a sub-directory nobody can list ----------------------------------------------------
rm "$T/src/class_000/zz_fifo.jpg" "$T/src/class_002/zz_dangling.jpg"
mkdir "$T/src/class_001/locked"
cp "$T/src/class_001/img_00000.jpg" "$T/src/class_001/locked/"
chmod 755 "$T"
chmod -R a+rX "$T/src" && chmod 000 "$T/src/class_001/locked"
mkdir "$T/nobody" && chown 65534:65534 "$T/nobody"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
as_nobody "$MKBATCHFS" "$T/src" "$T/nobody/locked.bfs" 2>"$T/locked.err" ||
    { cat "$T/locked.err"; fail "mkbatchfs refused a folder with one unreadable sub-directory"; }
grep -q 'could not be listed.*class_001/locked: Permission denied' "$T/locked.err" ||
    { cat "$T/locked.err"; fail "mkbatchfs does not note the unreadable sub-directory"; }
as_nobody "$ENGINE_TOOL" batch "$T/src" "$OPTS" 0 0 "$T/nobody/b0" 2>"$T/engine.err" ||
    { cat "$T/engine.err"; fail "the folder source refused a folder with one unreadable sub-directory"; }
ok "an unreadable sub-directory is skipped with a note"

# ---- a mounted .bfs overwritten in place --------------------------------------------------
"$MKBATCHFS" "$T/src" "$T/ds.bfs" --quiet
"$GEN" "$T/other" 2 8 64 200 7
"$MKBATCHFS" "$T/other" "$T/other.bfs" --quiet
expect_log '^batchfs: .*/ds\.bfs: dataset file changed since it was opened \(overwritten or truncated in place\); every batch computed from now on fails .*$'
expect_log '^batchfs: epoch 2 batch 5: .*dataset file changed since it was opened.*$'
mount_bfs "$T/ds.bfs" "$M" -o "$OPTS,epochs=3"
cat "$M/epoch/0/batch_0" >"$T/before" || fail "reading before the change"
cp "$T/other.bfs" "$T/ds.bfs" # in place: O_TRUNC, then write
if timeout 20 cat "$M/epoch/2/batch_5" >/dev/null 2>"$T/cat.err"; then
    fail "a batch computed after the .bfs was overwritten in place was served"
fi
grep -q 'Input/output error' "$T/cat.err" || { cat "$T/cat.err"; fail "the read did not fail with EIO"; }
is_mounted "$M" || fail "the mount died after its .bfs was overwritten"
cmp -s "$T/before" "$M/epoch/0/batch_0" || fail "a batch computed before the change is gone"
pyx - "$M" <<'EOF' || fail "/stats after the dataset changed"
import sys, bfs
st = bfs.stats(sys.argv[1])
if st["batches"]["failed"] < 1:
    sys.exit("/stats counts no failed batch: %s" % st["batches"])
EOF
grep -q 'ds\.bfs: dataset file changed since it was opened' "$DAEMON_LOG" || fail "no log line names the changed file"
unmount_bfs "$M"
ok "a .bfs overwritten in place: EIO and a log line, never a signal"
