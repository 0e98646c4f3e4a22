#!/usr/bin/env bash
# tests/check_layering.sh [ROOT] — `make check-layering`: the include graph keeps the
# layers of docs/architecture.md. Exit 0 when it does; 1 with one line per violation.
#
# Layers, bottom up (a module may include its own headers and those of lower layers):
#   0 base/       errors, I/O helpers, hashing, endian, clock, mix64
#   1 cache/      the cache_dir store
#   2 engine/     the pipeline, plan, executor, tuner; engine/dataset/: the .bfs format,
#                 the packer, the sources (one module: subfolders are the engine's own)
#   3 mountopts/  the command line; gpu/ (libbatchfs-gpu), a library beside it
#   4 fs/         the FUSE adapter
#   5 programs/   the programs' mains (batchfs, mkbatchfs), `batchfs top`, `batchfs --bench`
# programs/ may include every layer; tests/ (not checked here) anything. Rules:
#   1. FUSE headers (<fuse*.h>) only in fs/ (not in programs/ either);
#   2. no include from a module to a higher layer, nor across modules of one layer
#      (so nothing includes programs/);
#   3. a header named *_internal.h only inside its own module;
#   4. outside engine/, of the engine's headers only its facade engine/api.h.
# ROOT defaults to the repository; tests/cli/layering.sh runs this on a copy with a
# planted back edge to prove it fails.
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
rank() {
    case $1 in
    base) echo 0 ;; cache) echo 1 ;; engine) echo 2 ;; mountopts | gpu) echo 3 ;; fs) echo 4 ;;
    programs) echo 5 ;;
    *) echo -1 ;;
    esac
}
bad=0
for f in base/*.[ch] cache/*.[ch] engine/*.[ch] engine/*/*.[ch] mountopts/*.[ch] gpu/*.[ch] \
    fs/*.[ch] programs/*.[ch]; do
    [ -f "$f" ] || continue
    m=${f%%/*}
    r=$(rank "$m")
    while IFS=: read -r line inc; do
        if [[ $inc =~ \#include[[:space:]]*\<fuse ]] && [ "$m" != fs ]; then
            echo "$f:$line: FUSE header outside fs/: ${inc#*#include}"
            bad=$((bad + 1))
            continue
        fi
        [[ $inc =~ \#include[[:space:]]*\"([a-z_]+)/([A-Za-z0-9_/]+\.h)\" ]] || continue
        dm=${BASH_REMATCH[1]} dh=${BASH_REMATCH[2]}
        [ "$dm" = "$m" ] && continue
        dr=$(rank "$dm")
        if [ "$dr" -lt 0 ]; then
            echo "$f:$line: includes $dm/$dh: $dm/ is no layer of the library"
            bad=$((bad + 1))
        elif [ "$dr" -ge "$r" ]; then
            echo "$f:$line: $m/ (layer $r) includes $dm/$dh (layer $dr): includes go down only"
            bad=$((bad + 1))
        elif [[ $dh == *_internal.h ]]; then
            echo "$f:$line: includes $dm/$dh, private to $dm/"
            bad=$((bad + 1))
        elif [ "$dm" = engine ] && [ "$dh" != api.h ]; then
            echo "$f:$line: includes engine/$dh: outside engine/, only its facade engine/api.h"
            bad=$((bad + 1))
        fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include' "$f")
done
if [ $bad -gt 0 ]; then
    echo "check-layering: $bad violation(s) of the layers (tests/check_layering.sh, docs/architecture.md)"
    exit 1
fi
echo "check-layering: OK (base < cache < engine < mountopts, gpu < fs < programs; FUSE only in fs/; engine/api.h the engine's one door)"
