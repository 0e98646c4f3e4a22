#!/usr/bin/env bash
# tests/cli/man_pages.sh — the man pages docs/man/batchfs.1 and docs/man/mkbatchfs.1 say
# what the programs' --help says: every long option (--foo) and short flag (-x) that
# `batchfs --help` or `mkbatchfs --help` lists, and for batchfs every -o option name
# (`name=`) of `batchfs --help` and of docs/options.md's tables, and the mount options
# that --help says pass to the mount, are in the page; no option is in a page that --help
# no longer lists; the version in .TH is `--version`'s. The checker itself must notice a
# page with an option taken out. Then the pages must render without a warning: groff
# -man -ww (groff-base, which man-db needs; `make deps` installs it), else mandoc -T lint;
# with neither, the test skips (exit 77) after the checks above, saying so.
# Under a second.
. "$(dirname "$0")/../mount/lib.sh"

# the page's text without troff: \- is -, fonts and \c go, so `.BI seed= N` reads seed= N
plain() { sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\c$//' -e 's/\\(em/--/g' "$1"; }

# long options (--foo), short flags (-x, where --help lists them as flags) and -o names
longs() { grep -oE -- '(^|[^a-z0-9-])--[a-z][a-z0-9-]*' | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u; }
shorts() { grep -oE -- '(^ +|\[|, |\| )-[a-zA-Z]([] ,]|$)' | grep -oE -- '-[a-zA-Z]' | sort -u; }
onames() { grep -oE '(^|[^a-z0-9_./-])[a-z_][a-z0-9_]*=' | grep -oE '[a-z_][a-z0-9_]*=' | sort -u; }

# check PAGE HELP-TEXT-FILE [NAMES-FILE]: prints what is missing or stale, status 1 if any
check() {
    local page=$1 help=$2 names=${3:-} text bad=0 o
    text=$(plain "$page")
    for o in $(longs <"$help") $(shorts <"$help"); do
        grep -qE -- "(^|[^a-zA-Z0-9-])$o([^a-zA-Z0-9-]|\$)" <<<"$text" ||
            { echo "$page: $o (in --help) is missing"; bad=1; }
    done
    for o in $(longs <<<"$text"); do
        grep -qE -- "(^|[^a-zA-Z0-9-])$o([^a-zA-Z0-9-]|\$)" "$help" ||
            { echo "$page: $o is not in --help (gone?)"; bad=1; }
    done
    if [ -n "$names" ]; then
        for o in $(cat "$names"); do
            grep -qE -- "(^|[^a-z0-9_])$o" <<<"$text" || { echo "$page: -o $o is missing"; bad=1; }
        done
        for o in $(onames <<<"$text"); do
            grep -qxF -- "$o" "$names" || { echo "$page: -o $o is not an option (gone?)"; bad=1; }
        done
    fi
    return $bad
}

"$BATCHFS" --help >"$T/batchfs.help"
"$MKBATCHFS" --help >"$T/mkbatchfs.help"
# batchfs's -o names: --help's option lines (`  name=...`), docs/options.md's tables
# (each `name=` of a row's first cell), and the FUSE and fstab options --help says pass
# or are ignored
{
    grep -oE '^  [a-z_][a-z0-9_]*=' "$T/batchfs.help" | tr -d ' '
    grep '^| `' docs/options.md | cut -d'|' -f2 | grep -oE '`[a-z_][a-z0-9_]*=' | tr -d '`'
    sed -n '/^  allow_other/,/ignored/p' "$T/batchfs.help" | grep -oE '[a-z_]+='
} | sort -u >"$T/onames"
[ "$(wc -l <"$T/onames")" -ge 30 ] || fail "only $(wc -l <"$T/onames") -o names found in --help and docs/options.md"
sed -n '/^  allow_other/,/ignored/p' "$T/batchfs.help" | grep -oE '[a-z_][a-z_-]*,' | tr -d , >"$T/passed"
[ -s "$T/passed" ] || fail "no passed-through mount options found in batchfs --help"

check docs/man/batchfs.1 "$T/batchfs.help" "$T/onames" >"$T/out" || { cat "$T/out" >&2; fail "batchfs.1 differs from batchfs --help"; }
text=$(plain docs/man/batchfs.1)
for o in $(cat "$T/passed"); do
    grep -qE -- "(^|[^a-z_])$o([^a-z_]|\$)" <<<"$text" ||
        fail "batchfs.1: the mount option $o (in --help) is missing"
done
check docs/man/mkbatchfs.1 "$T/mkbatchfs.help" >"$T/out" || { cat "$T/out" >&2; fail "mkbatchfs.1 differs from mkbatchfs --help"; }
for p in batchfs mkbatchfs; do
    v=$("$BUILD/$p" --version | awk '{print $2}')
    grep -qE "^\.TH [A-Z]+ 1 [0-9-]+ \"batchfs $v\"" "docs/man/$p.1" ||
        fail "$p.1: .TH does not name version $v ($p --version): $(grep '^\.TH' "docs/man/$p.1")"
done
ok "batchfs.1 and mkbatchfs.1 list every option of --help ($(wc -l <"$T/onames") -o names), none that is gone, and the version"

# the checker notices a page with an option taken out, and one with an option too many
grep -v -- 'cache_dir_mb' docs/man/batchfs.1 >"$T/less.1"
! check "$T/less.1" "$T/batchfs.help" "$T/onames" >"$T/out" && grep -q "cache_dir_mb= is missing" "$T/out" ||
    { cat "$T/out" >&2; fail "the checker passed a batchfs.1 without cache_dir_mb"; }
grep -vF -- '\-\-reference' docs/man/batchfs.1 >"$T/less.1"
! check "$T/less.1" "$T/batchfs.help" "$T/onames" >"$T/out" && grep -q -- "--reference (in --help) is missing" "$T/out" ||
    { cat "$T/out" >&2; fail "the checker passed a batchfs.1 without --reference"; }
{ cat docs/man/mkbatchfs.1 && printf '.TP\n.B \\-\\-frobnicate\nGone.\n'; } >"$T/more.1"
! check "$T/more.1" "$T/mkbatchfs.help" >"$T/out" && grep -q -- "--frobnicate is not in --help" "$T/out" ||
    { cat "$T/out" >&2; fail "the checker passed a mkbatchfs.1 with an option --help lacks"; }
ok "the checker fails a page without cache_dir_mb=, without --reference, or with --frobnicate"

# rendering: no warning from the formatter
if command -v groff >/dev/null; then
    for p in batchfs mkbatchfs; do
        groff -man -Tutf8 -ww -z "docs/man/$p.1" >"$T/out" 2>&1 || true
        [ ! -s "$T/out" ] || { cat "$T/out" >&2; fail "groff -man -ww warns on $p.1"; }
        n=$(groff -man -Tutf8 "docs/man/$p.1" 2>/dev/null | wc -l)
        [ "$n" -gt 40 ] || fail "$p.1 renders to $n lines only"
    done
    ok "groff -man -ww renders both pages without a warning"
elif command -v mandoc >/dev/null; then
    for p in batchfs mkbatchfs; do
        mandoc -T lint -W warning "docs/man/$p.1" >"$T/out" 2>&1 ||
            { cat "$T/out" >&2; fail "mandoc -T lint warns on $p.1"; }
    done
    ok "mandoc -T lint passes both pages"
else
    echo "SKIP: $CASE: the options match, but no man page formatter (groff, mandoc) to check the rendering: 'make deps' installs groff-base" >&2
    exit 77
fi
