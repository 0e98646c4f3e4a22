#!/usr/bin/env bash
# tests/mount/cache_dir_crash.sh — daemons killed with SIGKILL while they compute and
# publish into a shared cache_dir leave a store that never serves a torn batch:
#  - rounds: a daemon reading epoch R (and, in every other round, a second daemon on the
#    same store reading it too) is killed -9 at a different moment each round, while the
#    batches of that epoch are being computed and published;
#  - then a fresh daemon on the store reads every batch of those epochs: each equals the engine's
#    in-process bytes, no entry was found torn or corrupt (publication is atomic), and
#    every batch was either served from the store or computed (keys held by the dead
#    daemons were taken over).
# The exact mid-publish moment (a writer killed between its payload and its link) is
# covered deterministically by tests/check_store.c (kill9_mid_publish); here the kills
# land wherever the daemons are.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/images" 4 24 200 400 9
"$MKBATCHFS" --quiet "$T/images" "$T/d.bfs"
D=$T/store
mkdir -m 700 "$D"
PIPE=batch=8,size=224,seed=3
OPTS=$PIPE,cache_dir=$D
nb=12
# where O_TMPFILE is missing, temporaries of killed writers are removed, and logged
expect_log "^batchfs: cache_dir ${D//./\\.}: removed v2/.* left by a writer that died$"

stat_of() { python3 -c "import json,sys; d=json.load(open(sys.argv[1]+'/stats')); print(eval(sys.argv[2]))" "$@"; }
rounds=6

# reader MNT EPOCH: read the epoch in order; a read of a dead mount fails, as expected
reader() { local k; for k in $(seq 0 $((nb - 1))); do cat "$1/epoch/$2/batch_$k" >/dev/null 2>&1 || return 0; done; }

# kill_daemon PID MNT: SIGKILL, reap, detach the dead mount
kill_daemon() {
    kill -KILL "$1" 2>/dev/null || true
    wait_exit "$1" 10 || fail "daemon $1 still running 10 s after SIGKILL"
    forget "$1"
    fusermount3 -u -z "$2" 2>/dev/null || umount -l "$2" 2>/dev/null || true
}

# calibration: epoch 0, read whole, timed; round R is killed R/(rounds+1) into its epoch
mkdir "$T/c"
mount_bfs "$T/d.bfs" c -o "$OPTS,threads=2"
t0=$(date +%s%N)
reader "$T/c" 0
ms=$((($(date +%s%N) - t0) / 1000000))
unmount_bfs "$T/c"
for round in $(seq $rounds); do
    mkdir "$T/a$round" "$T/b$round"
    mount_bfs "$T/d.bfs" "a$round" -o "$OPTS,threads=2"
    a=$DAEMON_PID
    reader "$T/a$round" "$round" & ra=$!
    b=
    if [ $((round % 2)) = 0 ]; then
        mount_bfs "$T/d.bfs" "b$round" -o "$OPTS,threads=1"
        b=$DAEMON_PID
        reader "$T/b$round" "$round" & rb=$!
    fi
    sleep "$(awk -v r="$round" -v n="$rounds" -v ms="$ms" 'BEGIN{printf "%.3f", ms * r / (n + 1) / 1000}')"
    kill_daemon "$a" "$T/a$round"
    wait "$ra" || true
    if [ -n "$b" ]; then
        # the survivor takes over the keys the dead daemon held, and finishes
        wait "$rb" || true
        unmount_bfs "$T/b$round"
    fi
done
ok "$rounds rounds of kill -9 mid-epoch (an epoch takes $ms ms; half the rounds with a second daemon on the store, which finished)"

mkdir "$T/v"
mount_bfs "$T/d.bfs" v -o "$OPTS,threads=1"
for e in $(seq $rounds); do
    for k in $(seq 0 $((nb - 1))); do
        ref_batch "$T/d.bfs" "$PIPE" "$e" "$k" "$T/ref"
        cmp "$T/v/epoch/$e/batch_$k" "$T/ref" ||
            fail "epoch $e batch $k differs from the engine's bytes after the kills"
    done
done
corrupt=$(stat_of "$T/v" "d['cache_dir']['corrupt']")
served=$(stat_of "$T/v" "d['cache_dir']['served']")
computed=$(stat_of "$T/v" "d['batches']['computed']")
[ "$corrupt" = 0 ] || fail "$corrupt torn or corrupt entries found after the kills"
[ "$served" -ge 1 ] || fail "nothing was served from the store the killed daemons filled"
unmount_bfs "$T/v"
ok "after the kills: $served batches from the store, $computed computed, none torn, bytes equal the engine's"
