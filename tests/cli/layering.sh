#!/usr/bin/env bash
# tests/cli/layering.sh — `make check-layering` (tests/check_layering.sh, run by `make
# test`) passes on the tree, reporting its known edges (none: tests/layering.allow is
# empty), and fails, naming the edge, on each violation planted into a scratch copy of the
# tree and its build: a back edge, FUSE outside fs/ (a header; a call through a
# hand-written extern), a private header, an engine header beside the facade, an include
# across one rank, includes of programs/; and on each evasion of a textual check:
# "# include", <cache/x.h> through -I., a "../" path, a macro include, an `extern`
# declaration of a cache function called from fs/. A line of tests/layering.allow whose
# edge is gone (or breaks no rule, or names no item) fails too, and so does a folder of C
# sources that is in no layer.
# The scratch copy keeps the build's objects and times, so make recompiles only the planted
# file (CI's -Werror too: the plants compile cleanly).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
BUILD=${BUILD#"$PWD"/}
[ -d "$BUILD/obj/fs" ] || { echo "FAIL: no objects in $BUILD/obj: run make first" >&2; exit 1; }
make -s --no-print-directory BUILD="$BUILD" check-layering >"${TMPDIR:-/tmp}/layering.$$" 2>&1 || {
    cat "${TMPDIR:-/tmp}/layering.$$" >&2
    rm -f "${TMPDIR:-/tmp}/layering.$$"
    echo "FAIL: the tree itself breaks the layers" >&2
    exit 1
}
out=$(cat "${TMPDIR:-/tmp}/layering.$$") && rm -f "${TMPDIR:-/tmp}/layering.$$"
n=$(grep -Ec '^(include|call) ' tests/layering.allow || true) # grep -c fails on 0 (the list is empty)
[ "$n" = 0 ] || echo "$out" | grep -Eq "^known, allowed: (include|call) [a-z/]+ -> [a-zA-Z]+: " ||
    { echo "$out" >&2; echo "FAIL: the known edges are not reported" >&2; exit 1; }
echo "$out" | grep -q "^check-layering: OK: no new edge; $n known edge(s) allowed" ||
    { echo "$out" >&2; echo "FAIL: the OK line does not count the $n known edges" >&2; exit 1; }
echo "ok - the tree passes with its $n known edges (tests/layering.allow)"

T=$(mktemp -d "${TMPDIR:-/tmp}/layering.XXXXXX")
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/tree/tests" "$T/tree/$BUILD"
cp -a base cache engine mountopts gpu fs programs Makefile "$T/tree/"
cp -a tests/check_layering.sh tests/layering.allow "$T/tree/tests/"
cp -a "$BUILD/obj" "$T/tree/$BUILD/"
[ -d "$BUILD/gen" ] && cp -a "$BUILD/gen" "$T/tree/$BUILD/"
rm -rf "$T/tree/$BUILD/obj/tests"

gate() { make -s --no-print-directory -C "$T/tree" BUILD="$BUILD" check-layering >"$T/out" 2>&1; }
restore() { # FILE: the source, its object and .d as the build left them
    local o=$BUILD/obj/${1%.*}.o
    cp -p "$1" "$T/tree/$1"
    cp -p "$o" "$T/tree/$o"
    cp -p "${o%.o}.d" "$T/tree/${o%.o}.d"
}
plant() { # NAME FILE TEXT EXPECTED-LINE-REGEX
    restore "$2"
    printf '%s\n' "$3" >>"$T/tree/$2"
    if gate; then
        cat "$T/out" >&2
        echo "FAIL: $1: check-layering passed with this in $2: $3" >&2
        exit 1
    fi
    grep -Eq "$4" "$T/out" || { cat "$T/out" >&2; echo "FAIL: $1: no line matching $4" >&2; exit 1; }
    grep -q '^check-layering: FAILED: ' "$T/out" || { cat "$T/out" >&2; echo "FAIL: $1: no FAILED line" >&2; exit 1; }
    restore "$2"
    echo "ok - $1: $(grep -Em1 "$4" "$T/out")"
}
gate || { cat "$T/out" >&2; echo "FAIL: the scratch copy does not pass" >&2; exit 1; }

# the rules
plant "back edge" cache/batchcache.c '#include "fs/fs.h"' \
    '^cache/batchcache\.c: include cache -> fs/fs\.h: cache/ \(rank 1\) reaches fs/ \(rank 5\)'
plant "FUSE header outside fs/" engine/rng.c $'#define FUSE_USE_VERSION 312\n#include <fuse_lowlevel.h>' \
    '^engine/rng\.c: include engine -> <fuse_lowlevel\.h>: FUSE header outside fs/'
plant "FUSE header in programs/" programs/group_reset.c $'#define FUSE_USE_VERSION 312\n#include <fuse_lowlevel.h>' \
    '^programs/group_reset\.c: include programs -> <fuse_lowlevel\.h>: FUSE header outside fs/'
plant "private header" fs/log.c '#include "engine/resize_internal.h"' \
    '^fs/log\.c: include fs -> engine/resize_internal\.h: engine/resize_internal\.h is private to engine/'
plant "engine header beside the facade" fs/names.c '#include "engine/plan.h"' \
    '^fs/names\.c: include fs -> engine/plan\.h: outside engine/, only its public header engine/api\.h'
plant "same rank" gpu/cuda.c '#include "mountopts/mountopts.h"' \
    '^gpu/cuda\.c: include gpu -> mountopts/mountopts\.h: gpu/ and mountopts/ share rank 4'
plant "fs/ includes programs/" fs/names.c '#include "programs/top.h"' \
    '^fs/names\.c: include fs -> programs/top\.h: fs/ \(rank 5\) reaches programs/ \(rank 6\)'
plant "engine/ includes programs/" engine/rng.c '#include "programs/bench.h"' \
    '^engine/rng\.c: include engine -> programs/bench\.h: engine/ \(rank 3\) reaches programs/ \(rank 6\)'
plant "engine/dataset/ includes the engine above it" engine/dataset/guard.c '#include "engine/plan.h"' \
    '^engine/dataset/guard\.c: include engine/dataset -> engine/plan\.h: engine/dataset/ \(rank 2\) reaches engine/ \(rank 3\)'

# the evasions of a textual check
plant "'# include'" base/hash.c '#  include "cache/store.h"' \
    '^base/hash\.c: include base -> cache/store\.h: base/ \(rank 0\) reaches cache/ \(rank 1\)'
plant "<cache/x.h> through -I." fs/names.c '#include <cache/batchcache.h>' \
    '^fs/names\.c: include fs -> cache/batchcache\.h: cache/ is used by the engine alone'
plant "a ../ path" fs/log.c '#include "../engine/dataset/folder.h"' \
    '^fs/log\.c: include fs -> engine/dataset/folder\.h: outside engine/, only its public header'
plant "a macro include" gpu/cuda.c $'#define PLANTED_HEADER "engine/plan.h"\n#include PLANTED_HEADER' \
    '^gpu/cuda\.c: include gpu -> engine/plan\.h: outside engine/, only its public header'
plant "an extern cache function called from fs/" fs/names.c \
    $'extern void bfs_bc_trim(void *m, unsigned long room);\nvoid planted_call(void);\nvoid planted_call(void) { bfs_bc_trim(0, 0); }' \
    '^fs/names\.c: call fs -> cache/batchmem\.c \(bfs_bc_trim\): cache/ is used by the engine alone'
plant "an extern FUSE function called from engine/" engine/rng.c \
    $'extern int fuse_version(void);\nint planted_call(void);\nint planted_call(void) { return fuse_version(); }' \
    '^engine/rng\.c: call engine -> libfuse \(fuse_version\): FUSE call outside fs/'
plant "an extern engine function beside the facade" mountopts/mountopts.c \
    $'extern int bfs_plan_batch_len(void);\nint planted_call(void);\nint planted_call(void) { return bfs_plan_batch_len(); }' \
    '^mountopts/mountopts\.c: call mountopts -> engine/plan\.c \(bfs_plan_batch_len\): outside engine/, only functions its public header engine/api\.h declares'

# a folder of C sources that is no layer
mkdir "$T/tree/extra" && echo 'int extra_fn(void);' >"$T/tree/extra/x.c"
if BUILD=$BUILD bash "$T/tree/tests/check_layering.sh" "$T/tree" >"$T/out" 2>&1; then
    echo "FAIL: check-layering passed with extra/x.c, a folder of no layer" >&2
    exit 1
fi
grep -q '^extra/x\.c: extra/ is no layer of docs/architecture\.md' "$T/out" || { cat "$T/out" >&2; exit 1; }
rm -r "$T/tree/extra"
echo "ok - a folder of no layer: $(head -1 "$T/out")"

# the list only shrinks
allow_line() { # NAME LINE EXPECTED-REGEX
    cp -p tests/layering.allow "$T/tree/tests/layering.allow"
    printf '%s\n' "$2" >>"$T/tree/tests/layering.allow"
    if gate; then
        echo "FAIL: $1: check-layering passed with '$2' in tests/layering.allow" >&2
        exit 1
    fi
    grep -Eq "$3" "$T/out" || { cat "$T/out" >&2; echo "FAIL: $1: no line matching $3" >&2; exit 1; }
    cp -p tests/layering.allow "$T/tree/tests/layering.allow"
    echo "ok - $1: $(grep -Em1 "$3" "$T/out")"
}
allow_line "a stale entry" 'include fs -> engine/plan.h 2' \
    '^tests/layering\.allow:[0-9]+: include fs -> engine/plan\.h: no such edge breaks a rule any more'
allow_line "an entry that breaks no rule" 'include fs -> engine/api.h 2' \
    '^tests/layering\.allow:[0-9]+: include fs -> engine/api\.h: no such edge breaks a rule any more'
allow_line "an entry without its item" 'call fs -> cache/batchmem.c' \
    '^tests/layering\.allow:[0-9]+: not "include\|call UNIT -> TARGET ITEM'
gate || { cat "$T/out" >&2; echo "FAIL: the restored copy does not pass" >&2; exit 1; }
echo "layering: all checks passed"
