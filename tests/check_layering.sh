#!/usr/bin/env bash
# tests/check_layering.sh [ROOT] — `make check-layering` (a prerequisite of `make test`):
# the include and call graph of the built objects keeps the layers of docs/architecture.md.
# Exit 0 when every edge that breaks a rule is a known one of tests/layering.allow; 1 with
# one line per new edge (and per stale line of the list); 2 when the objects are missing.
#
# The edges come from the compiler, not from reading the sources:
#   include  A -> HEADER   every header of the .d file the build wrote for an object of
#                          unit A (-MMD: the headers that compilation opened, directly or
#                          through other headers, whatever the spelling: "# include",
#                          <dir/x.h> through -I., "../x.h", a macro naming the file; not
#                          system headers, but FUSE's come through -I/usr/include/fuse3,
#                          and a FUSE call shows in the symbols anyway);
#   call     A -> FILE.c   a symbol left undefined in an object of A (nm -u) that the object
#                          of FILE.c defines (an `extern` written by hand counts too);
#                          A -> libfuse for a symbol that libfuse3 defines.
# Units, bottom up (an edge may go to a lower rank only; equal ranks know nothing of each
# other): 0 base/, 1 cache/, 2 engine/dataset/ and engine/remote/, 3 engine/ (its top
# folder), 4 mountopts/ and gpu/ (with the build's gen/convert_ptx.c), 5 fs/, 6 programs/.
# Rules, each from docs/architecture.md:
#   1. FUSE (a fuse*.h header, a libfuse symbol) only in fs/;
#   2. edges go down the ranks only (nothing reaches programs/; engine/'s subfolders know
#      nothing of its top folder);
#   3. a header named *_internal.h only inside its own folder;
#   4. outside a module with one public header (its door: engine/api.h for all of engine/,
#      fs/fs.h, mountopts/mountopts.h, gpu/batchfs_gpu.h), of its headers only the door,
#      and of its functions only those the door itself declares (found in the door's
#      preprocessed text, so what it merely includes from elsewhere is not the door's);
#   5. cache/ is used by the engine alone.
# Every rule-breaking edge must be listed in tests/layering.allow ("KIND A -> TARGET ITEM":
# the edge and the item of issue 33 that removes it); it is then reported as known,
# allowed. A listed edge that no longer exists, or that breaks no rule, fails too: the list
# only shrinks. BUILD (default build) names the build whose objects are read; run through
# `make check-layering`, which builds them first. VERBOSE=1 lists every known edge.
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
BUILD=${BUILD:-build}
CC=${CC:-cc}
allow=tests/layering.allow
T=$(mktemp -d "${TMPDIR:-/tmp}/layering.XXXXXX") || exit 2
trap 'rm -rf "$T"' EXIT

unit_of() { # source path -> unit, or "" for a folder that is no layer
    case $1 in
    base/*.c) echo base ;; cache/*.c) echo cache ;;
    engine/dataset/*.c) echo engine/dataset ;; engine/remote/*.c) echo engine/remote ;;
    engine/*/*) echo "" ;; engine/*.c) echo engine ;;
    mountopts/*.c) echo mountopts ;; gpu/*.c) echo gpu ;; fs/*.c) echo fs ;;
    programs/*.c | programs/*.cc) echo programs ;;
    *) echo "" ;;
    esac
}

# the sources of the library, the programs and libbatchfs-gpu, and their objects
missing=0 objs=() deps=()
: >"$T/src"
while IFS= read -r s; do
    s=${s#./}
    u=$(unit_of "$s")
    if [ -z "$u" ]; then
        echo "$s: ${s%/*}/ is no layer of docs/architecture.md: put it in one, or add a" \
            "unit to tests/check_layering.sh and the docs"
        missing=1
        continue
    fi
    o=$BUILD/obj/${s%.*}.o
    if [ ! -f "$o" ] || [ ! -f "${o%.o}.d" ] || [ "$s" -nt "$o" ]; then
        echo "$s: $o missing or older than its source: run \`make check-layering\` (it builds them)"
        missing=1
        continue
    fi
    echo "$s $u $o" >>"$T/src"
    objs+=("$o") deps+=("${o%.o}.d")
done < <(find . \( -path ./tests -o -path ./python -o -path ./docs -o -path ./build \
    -o -path "./$BUILD" -o -path ./.git \) -prune -o \( -name '*.c' -o -name '*.cc' \) -print |
    sort)
g=$BUILD/obj/gen/convert_ptx.o
if [ -f "$g" ] && [ -f "${g%.o}.d" ]; then
    echo "gen/convert_ptx.c gpu $g" >>"$T/src"
    objs+=("$g") deps+=("${g%.o}.d")
fi
[ $missing = 0 ] || exit 2

# the functions each door declares itself (its own lines of its preprocessed text)
for d in engine/api.h fs/fs.h mountopts/mountopts.h gpu/batchfs_gpu.h; do
    [ -f "$d" ] || continue
    # shellcheck disable=SC2046
    "$CC" -E -std=c11 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -I. \
        $(pkg-config --cflags fuse3 2>/dev/null) -x c "$d" 2>"$T/cpp.err" |
        awk -v door="$d" '
            /^# [0-9]+ "/ { f = $3; gsub(/"/, "", f); sub(/^\.\//, "", f); next }
            f == door {
                while (match($0, /[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
                    id = substr($0, RSTART, RLENGTH); sub(/[ \t]*\($/, "", id)
                    print "DOOR", door, id
                    $0 = substr($0, RSTART + RLENGTH)
                }
            }' >>"$T/door" || {
        cat "$T/cpp.err"
        echo "check-layering: cannot preprocess $d"
        exit 2
    }
done
touch "$T/door"

# libfuse's symbols (FUSE calls outside fs/)
fuselib=$(pkg-config --variable=libdir fuse3 2>/dev/null)/libfuse3.so
[ -f "$fuselib" ] || fuselib=$("$CC" -print-file-name=libfuse3.so)
nm -D --defined-only "$fuselib" 2>/dev/null | awk 'NF >= 3 { sub(/@.*/, "", $3); print "FUSE", $3 }' \
    >"$T/fuse"

nm -A -P "${objs[@]}" 2>/dev/null | awk '{ f = $1; sub(/:$/, "", f); print "NM", f, $2, $3 }' \
    >"$T/nm"

[ -f "$allow" ] || { allow=$T/allow.none && : >"$allow"; }
awk -v root="$(pwd -P)" -v allowfile="$allow" -v verbose="${VERBOSE:-0}" '
function norm(p,    n, i, a, out, k, st) {
    if (substr(p, 1, length(root) + 1) == root "/") p = substr(p, length(root) + 2)
    if (p ~ /^\//) return p
    n = split(p, a, "/"); k = 0
    for (i = 1; i <= n; i++) {
        if (a[i] == "" || a[i] == ".") continue
        if (a[i] == ".." && k > 0 && st[k] != "..") { k--; continue }
        st[++k] = a[i]
    }
    out = ""
    for (i = 1; i <= k; i++) out = out (i > 1 ? "/" : "") st[i]
    return out
}
function unit(p) {
    if (p ~ /^engine\/dataset\//) return "engine/dataset"
    if (p ~ /^engine\/remote\//) return "engine/remote"
    if (p ~ /^engine\/[^\/]*$/) return "engine"
    if (p ~ /^(base|cache|mountopts|gpu|fs|programs)\/[^\/]*$/) { sub(/\/.*/, "", p); return p }
    return "?"
}
function module(u) { return u ~ /^engine/ ? "engine" : u }
function rank(u) { return u in RANK ? RANK[u] : -1 }
function isfuse(h) { return h ~ /^\// && h ~ /(^|\/)fuse[^\/]*\.h$/ }
# the rule an edge from unit a to unit b (the header or the file h) breaks, or ""
function rule(a, b, h, kind, sym,    d) {
    if (b == "?") return h " is in no layer of the library"
    if (h ~ /_internal\.h$/) return h " is private to " b "/"
    if (module(a) != module(b) && (module(b) in DOORF)) {
        d = DOORF[module(b)]
        if (kind == "include" && h != d)
            return "outside " module(b) "/, only its public header " d
        if (kind == "call" && !((d, sym) in DECL))
            return "outside " module(b) "/, only functions its public header " d " declares"
    }
    if (rank(b) > rank(a)) return a "/ (rank " rank(a) ") reaches " b "/ (rank " rank(b) "): edges go down only"
    if (rank(b) == rank(a)) return a "/ and " b "/ share rank " rank(a) ": they know nothing of each other"
    if (b == "cache" && module(a) != "engine") return "cache/ is used by the engine alone"
    return ""
}
function edge(key, why, file, what) {
    if (!(key in WHY)) { WHY[key] = why; NKEYS++; KEYS[NKEYS] = key }
    if (!((key, file) in SEEN)) { SEEN[key, file] = 1; FILES[key] = FILES[key] " " file }
    if (what != "" && !((key, "sym", what) in SEEN)) {
        SEEN[key, "sym", what] = 1; WHAT[key] = WHAT[key] (WHAT[key] == "" ? "" : ", ") what
    }
}
BEGIN {
    RANK["base"] = 0; RANK["cache"] = 1; RANK["engine/dataset"] = 2; RANK["engine/remote"] = 2
    RANK["engine"] = 3; RANK["mountopts"] = 4; RANK["gpu"] = 4; RANK["fs"] = 5; RANK["programs"] = 6
    DOORF["engine"] = "engine/api.h"; DOORF["fs"] = "fs/fs.h"
    DOORF["mountopts"] = "mountopts/mountopts.h"; DOORF["gpu"] = "gpu/batchfs_gpu.h"
}
FILENAME ~ /\/src$/ { SRCU[$1] = $2; OBJSRC[$3] = $1; DEPSRC[substr($3, 1, length($3) - 2) ".d"] = $1; next }
FILENAME ~ /\/door$/ { DECL[$2, $3] = 1; next }
FILENAME ~ /\/fuse$/ { FUSESYM[$2] = 1; next }
FILENAME ~ /\/nm$/ {
    if ($4 == "U") { NU++; UOBJ[NU] = $2; USYM[NU] = $3 }
    else if ($4 ~ /^[TDBRCVWGSiu]$/ && !($3 in DEF)) DEF[$3] = $2
    next
}
FILENAME == allowfile {
    if ($0 ~ /^[ \t]*(#|$)/) next
    if (NF < 5 || ($1 != "include" && $1 != "call") || $3 != "->" || $5 !~ /^[0-9]+(,[0-9]+)*$/) {
        printf "%s:%d: not \"include|call UNIT -> TARGET ITEM[,ITEM] [note]\": %s\n", allowfile, FNR, $0
        BAD++; next
    }
    k = $1 " " $2 " -> " $4; ALLOW[k] = $5; ALINE[k] = FNR; NALLOW++; ALLOWK[NALLOW] = k
    next
}
# a .d file: its first rule lists the source, then every header it opened
FILENAME ~ /\.d$/ {
    if (FNR == 1) { DONE = 0; LINE = "" }
    if (DONE) next
    l = $0; cont = sub(/\\$/, "", l); LINE = LINE " " l
    if (cont) next
    DONE = 1
    s = DEPSRC[FILENAME]; a = SRCU[s]
    sub(/^[^:]*:/, "", LINE)
    n = split(LINE, P, /[ \t]+/)
    first = 1
    for (i = 1; i <= n; i++) {
        if (P[i] == "") continue
        if (first) { first = 0; continue } # the source itself
        h = norm(P[i])
        if (h ~ /^\//) {
            if (isfuse(h) && module(a) != "fs") {
                t = h; sub(/.*\//, "", t)
                edge("include " a " -> <" t ">", "FUSE header outside fs/", s, "")
            }
            continue
        }
        b = unit(h)
        if (b == a) continue
        why = rule(a, b, h, "include", "")
        if (why != "") edge("include " a " -> " h, why, s, "")
    }
    next
}
END {
    for (i = 1; i <= NU; i++) {
        o = UOBJ[i]; sym = USYM[i]; s = OBJSRC[o]; a = SRCU[s]
        if (sym in DEF) {
            ds = OBJSRC[DEF[sym]]; b = SRCU[ds]
            if (b == a) continue
            why = rule(a, b, ds, "call", sym)
            if (why != "") edge("call " a " -> " ds, why, s, sym)
        } else if ((sym in FUSESYM) && module(a) != "fs")
            edge("call " a " -> libfuse", "FUSE call outside fs/", s, sym)
    }
    new = 0; known = 0; ninc = 0; ncall = 0
    for (i = 1; i <= NKEYS; i++) {
        k = KEYS[i]; f = FILES[k]; sub(/^ /, "", f); gsub(/ /, ", ", f)
        w = WHAT[k] == "" ? "" : " (" WHAT[k] ")"
        if (k in ALLOW) {
            known++; if (k ~ /^include/) ninc++; else ncall++
            split(k, E, " "); g = E[1] " " E[2] " -> " module(unit(E[4]))
            if (E[4] ~ /^</ || E[4] == "libfuse") g = E[1] " " E[2] " -> FUSE"
            if (!(g in GN)) { NG++; GK[NG] = g }
            GN[g]++; GI[g, ALLOW[k]] = 1
            if (verbose) printf "known, allowed (issue 33 item %s): %s%s: %s\n", ALLOW[k], k, w, WHY[k]
        } else {
            new++
            printf "%s: %s%s: %s\n", f, k, w, WHY[k]
        }
    }
    stale = 0
    for (i = 1; i <= NALLOW; i++) {
        k = ALLOWK[i]
        if (k in WHY) continue
        stale++
        printf "%s:%d: %s: no such edge breaks a rule any more: delete the line (the list only shrinks)\n", allowfile, ALINE[k], k
    }
    for (i = 1; i <= NG; i++) {
        g = GK[i]; items = ""
        for (x in GI) {
            split(x, XX, SUBSEP)
            if (XX[1] == g) items = items (items == "" ? "" : " or ") XX[2]
        }
        printf "known, allowed: %s: %d edge(s), removed by issue 33 item %s\n", g, GN[g], items
    }
    if (new || stale || BAD) {
        printf "check-layering: FAILED: %d new edge(s) breaking the layers, %d stale line(s) of %s, %d bad line(s) (tests/check_layering.sh, docs/architecture.md)\n", new, stale, allowfile, BAD
        exit 1
    }
    printf "check-layering: OK: no new edge; %d known edge(s) allowed (%d include, %d call) by %s\n", known, ninc, ncall, allowfile
}' "$T/src" "$T/door" "$T/fuse" "$T/nm" "$allow" "${deps[@]}"
