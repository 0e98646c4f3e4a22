#!/usr/bin/env bash
# tests/bench/alternate.sh OLD_REV ROUNDS BENCH [ARGS...] — one benchmark, alternated
# between the build of OLD_REV and this tree's build: old, new, old, new... ROUNDS times
# each, then every result line (one starting with a step's number, "2a.", or naming a
# ratio, a rate in images/s or a target), old and new per round. For a change that
# must not cost speed (a refactor): on a shared, noisy machine alternation puts the same
# noise on both sides, where two runs an hour apart would not.
#
#   bash tests/bench/alternate.sh b088b8d 3 tests/bench/bench_mount.sh /var/tmp/batchfs-corpus
#
# OLD_REV is built once (make -j2, into $BFS_ALT_DIR/REV, default /var/tmp/batchfs-alt);
# both sides run this tree's BENCH script (BUILD= set to each build), so the same steps
# are measured. Asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 3 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
rev=$(git rev-parse --short "$1") rounds=$2 bench=$3
shift 3
case $rounds in '' | *[!0-9]*) echo "alternate.sh: ROUNDS must be a number, not '$rounds'" >&2; exit 2 ;; esac
alt=${BFS_ALT_DIR:-/var/tmp/batchfs-alt}/$rev
if [ ! -x "$alt/build/batchfs" ]; then
    echo "== building $rev in $alt =="
    rm -rf "$alt" && mkdir -p "$alt"
    git archive "$rev" | tar -x -C "$alt"
    make -C "$alt" -j2 all >"$alt.build.log" 2>&1 || { tail -20 "$alt.build.log" >&2; exit 1; }
fi
make -j2 all >/dev/null
out=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-alt.XXXXXX")
trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
    for side in old new; do
        b=$PWD/build
        [ $side = old ] && b=$alt/build
        echo "== round $r: $side ($([ $side = old ] && echo "$rev" || echo "this tree")) =="
        BUILD=$b bash "$bench" "$@" >"$out/$side.$r" 2>&1 || echo "(exit $? — see below)"
    done
done
echo
echo "== the result lines (a step's number first, a ratio, a rate or a target), per round: old, new =="
for side in old new; do
    for r in $(seq "$rounds"); do grep -E '^ *[0-9]+[a-z]?[^ ]*\. |ratio|images/s|/ best|target' "$out/$side.$r" >"$out/$side.$r.l" || true; done
done
i=0
while IFS= read -r _; do
    i=$((i + 1))
    for r in $(seq "$rounds"); do
        printf '   round %d old: %s\n' "$r" "$(sed -n "${i}p" "$out/old.$r.l" | tr -s ' ' | cut -c1-150)"
        printf '   round %d new: %s\n' "$r" "$(sed -n "${i}p" "$out/new.$r.l" | tr -s ' ' | cut -c1-150)"
    done
    echo
done <"$out/old.1.l"
