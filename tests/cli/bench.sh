#!/usr/bin/env bash
# tests/cli/bench.sh — `batchfs --bench SOURCE` as a user meets it (programs/bench.c,
# mountopts/): a run on a small .bfs prints images/s, the stages and the reference rate,
# and --json gives one JSON object with those fields; an ImageFolder works as SOURCE and
# prints the folder notes; bad arguments are refused with exit 2 and a message naming them
# (a misspelled flag such as --epochs is not taken for --epoch, counts of 0, an epoch
# beyond the pipeline's, a second SOURCE), and batches too large for ram_mb or cache_mb with exit 1.
# No timing is asserted. A few seconds.
. "$(dirname "$0")/../mount/lib.sh"

rc=0
run() { # CMD...: stdout, stderr in $T/out, $T/err; status in $rc
    set +e
    "$@" >"$T/out" 2>"$T/err"
    rc=$?
    set -e
}
refused() { # WHAT TEXT CMD...: exit 2, TEXT on stderr
    local what=$1 text=$2
    shift 2
    run "$@"
    [ "$rc" = 2 ] || { cat "$T/err" >&2; fail "$what: exit $rc, expected 2"; }
    grep -qF -- "$text" "$T/err" || { cat "$T/err" >&2; fail "$what: stderr does not mention '$text'"; }
    echo "ok - refused: $what: $(head -n 1 "$T/err")"
}

"$GEN" "$T/images" 3 12 48 96 4
"$MKBATCHFS" --quiet "$T/images" "$T/d.bfs"

run "$BATCHFS" --bench "$T/d.bfs" -o batch=8,size=32 --batches 2 --reference 8
[ "$rc" = 0 ] || { cat "$T/err" >&2; fail "--bench: exit $rc"; }
for t in "images/s" "decode" "reference:"; do
    grep -q "$t" "$T/out" || { cat "$T/out" >&2; fail "--bench output lacks '$t'"; }
done
ok "--bench prints images/s, stages and the reference"

run "$BATCHFS" --bench "$T/d.bfs" -o batch=8,size=32 --batches=3 --epoch=1 --json
[ "$rc" = 0 ] || { cat "$T/err" >&2; fail "--bench --json: exit $rc"; }
python3 - "$T/out" <<'EOF' || fail "--bench --json"
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("images_per_s", "reference_images", "batch_bytes", "peak_rss_mb"):
    if k not in d:
        sys.exit("--json lacks %s: %s" % (k, sorted(d)))
if not d["images_per_s"] > 0:
    sys.exit("images_per_s %s" % d["images_per_s"])
# the warm-up batches are left out of the counters too: 3 batches of 8 images
dec = d["decodes"]
if dec["cropped"] + dec["full"] + dec["raw"] != d["images"] or d["images"] != 24:
    sys.exit("decodes %s for %s images: the warm-up counted?" % (dec, d["images"]))
if "buffer_allocs" not in d:
    sys.exit("--json lacks buffer_allocs")
EOF
ok "--bench --json (with --batches=N --epoch=E spellings) is one JSON object; decode counts are the timed images'"

echo "not an image" >"$T/images/class_000/readme.txt"
run "$BATCHFS" --bench "$T/images" -o batch=8,size=32 --batches 1 --reference 4
[ "$rc" = 0 ] || { cat "$T/err" >&2; fail "--bench on an ImageFolder: exit $rc"; }
grep -q "note: 1 file below the class directories is not named .jpg, .jpeg, .png or .webp" "$T/err" ||
    { cat "$T/err" >&2; fail "--bench on an ImageFolder: no note about readme.txt"; }
ok "--bench on an ImageFolder, with the note about a file that is not a sample"

refused "--epochs (not --epoch)" "unknown argument '--epochs'" \
    "$BATCHFS" --bench "$T/d.bfs" --epochs 3
refused "--batchesX" "unknown argument '--batchesX'" "$BATCHFS" --bench "$T/d.bfs" --batchesX 1
refused "--batches 0" "--batches=0: must be an integer in 1.." "$BATCHFS" --bench "$T/d.bfs" --batches 0
refused "--reference 0" "--reference=0" "$BATCHFS" --bench "$T/d.bfs" --reference 0
refused "--epoch beyond epochs" "--epoch 5: the pipeline has epochs 0..4" \
    "$BATCHFS" --bench "$T/d.bfs" -o epochs=5 --epoch 5
refused "--batches without a value" "--batches needs a value" "$BATCHFS" --bench "$T/d.bfs" --batches
refused "two sources" "--bench takes one SOURCE" "$BATCHFS" --bench "$T/d.bfs" "$T/d.bfs"
# batches too large for the RAM budget are refused before any is computed, as a mount does
run "$BATCHFS" --bench "$T/d.bfs" -o batch=8,size=1024,dtype=f32,ram_mb=64 --batches 1
[ "$rc" = 1 ] && grep -qF "batch=8,size=1024,dtype=f32 makes 100.7 MB batch files" "$T/err" &&
    grep -qF "at most ram_mb=64 MiB" "$T/err" ||
    { cat "$T/err" >&2; fail "--bench with ram_mb below two batches: exit $rc, expected 1 and the message"; }
echo "ok - refused: --bench batches larger than ram_mb: $(head -n 1 "$T/err")"
# a cache_mb that cannot hold one batch is refused as a mount refuses it
run "$BATCHFS" --bench "$T/d.bfs" -o batch=8,size=1024,dtype=f32,ram_mb=1024,cache_mb=16 --batches 1
[ "$rc" = 1 ] && grep -qF "batch=8,size=1024,dtype=f32 makes 100.7 MB batch files" "$T/err" &&
    grep -qF "cache_mb=16 MiB cannot hold one" "$T/err" ||
    { cat "$T/err" >&2; fail "--bench with cache_mb below one batch: exit $rc, expected 1 and the message"; }
echo "ok - refused: --bench cache_mb smaller than one batch: $(head -n 1 "$T/err")"
