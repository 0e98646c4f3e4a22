#!/usr/bin/env bash
# tests/mount/sample_cache.sh — the decoded-sample cache (sample_cache_mb=N) is a knob: it
# never changes a byte. A mount with it reads epochs 0 (filling the cache) and 1 (served
# from it: /stats sample_cache.hits > 0) and a mount without it reads the same batches:
# every batch equals the engine's in-process bytes either way, with a crop-heavy pipeline
# (random-resized-crop, flips, scaled IDCT allowed) and with an eval resize.
. "$(dirname "$0")/lib.sh"
require_fuse

"$GEN" "$T/images" 3 12 80 300 11
"$MKBATCHFS" --quiet "$T/images" "$T/d.bfs"
stat_of() { python3 -c "import json,sys; d=json.load(open(sys.argv[1]+'/stats')); print(eval(sys.argv[2]))" "$@"; }
nb=4

check_pipeline() { # PIPELINE_OPTS
    local pipe=$1 mode e k hits
    for e in 0 1; do
        for k in $(seq 0 $((nb - 1))); do ref_batch "$T/d.bfs" "$pipe" "$e" "$k" "$T/ref.$e.$k"; done
    done
    for mode in on off; do
        local o=$pipe
        [ "$mode" = on ] && o=$pipe,sample_cache_mb=64
        mkdir -p "$T/m"
        mount_bfs "$T/d.bfs" m -o "$o"
        for e in 0 1; do
            for k in $(seq 0 $((nb - 1))); do
                cmp "$T/m/epoch/$e/batch_$k" "$T/ref.$e.$k" ||
                    fail "$o: epoch $e batch $k differs from the engine's bytes (sample cache $mode)"
            done
        done
        hits=$(stat_of "$T/m" "d.get('sample_cache', {}).get('hits', 0)")
        if [ "$mode" = on ]; then
            [ "$hits" -gt 0 ] || fail "$o: epoch 1 got no sample cache hits"
            on_hits=$hits
        else
            [ "$hits" = 0 ] || fail "$o: sample cache hits ($hits) with the cache off"
        fi
        unmount_bfs "$T/m"
    done
    ok "$pipe: identical bytes with the sample cache on ($on_hits hits) and off"
}
check_pipeline batch=9,size=64,seed=4
check_pipeline batch=9,size=48,seed=4,augment=eval
