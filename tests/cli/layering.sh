#!/usr/bin/env bash
# tests/cli/layering.sh — `make check-layering` (tests/check_layering.sh) passes on the
# tree and fails on each kind of planted violation: a back edge (cache/ including fs/), a
# FUSE header in engine/ or in programs/, a module's private header used by another module,
# an include across one layer, an engine header other than its facade engine/api.h used
# outside engine/, and the adapter including the programs above it (fs/
# including programs/top.h).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tests/check_layering.sh || { echo "FAIL: the tree itself breaks the layers" >&2; exit 1; }
T=$(mktemp -d "${TMPDIR:-/tmp}/layering.XXXXXX")
trap 'rm -rf "$T"' EXIT
plant() { # NAME FILE LINE EXPECTED-MESSAGE-REGEX
    rm -rf "$T/tree" && mkdir "$T/tree"
    cp -r base cache engine mountopts gpu fs programs "$T/tree/"
    mkdir "$T/tree/tests" && cp tests/check_layering.sh "$T/tree/tests/"
    printf '%s\n' "$3" >>"$T/tree/$2"
    if bash "$T/tree/tests/check_layering.sh" "$T/tree" >"$T/out" 2>&1; then
        echo "FAIL: $1: check-layering passed with $3 in $2" >&2
        exit 1
    fi
    grep -Eq "$4" "$T/out" || { cat "$T/out" >&2; echo "FAIL: $1: wrong message" >&2; exit 1; }
    echo "ok - $1: $(head -1 "$T/out")"
}
plant "back edge" cache/store.c '#include "fs/fs.h"' '^cache/store\.c:[0-9]+: cache/ \(layer 1\) includes fs/fs\.h \(layer 4\)'
plant "FUSE outside fs/" engine/engine.c '#include <fuse_lowlevel.h>' '^engine/engine\.c:[0-9]+: FUSE header outside fs/'
plant "private header" fs/fs.c '#include "engine/resize_internal.h"' 'includes engine/resize_internal\.h, private to engine/'
plant "engine header beside the facade" mountopts/mountopts.c '#include "engine/plan.h"' '^mountopts/mountopts\.c:[0-9]+: includes engine/plan\.h: outside engine/, only its facade engine/api\.h'
plant "same layer" gpu/loader.c '#include "mountopts/mountopts.h"' 'gpu/ \(layer 3\) includes mountopts/mountopts\.h \(layer 3\)'
plant "fs/ includes programs/" fs/fs.c '#include "programs/top.h"' '^fs/fs\.c:[0-9]+: fs/ \(layer 4\) includes programs/top\.h \(layer 5\)'
plant "engine/ includes programs/" engine/engine.c '#include "programs/bench.h"' '^engine/engine\.c:[0-9]+: engine/ \(layer 2\) includes programs/bench\.h \(layer 5\)'
plant "FUSE in programs/" programs/batchfs_main.c '#include <fuse_lowlevel.h>' '^programs/batchfs_main\.c:[0-9]+: FUSE header outside fs/'
echo "layering: all checks passed"
