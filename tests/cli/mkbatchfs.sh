#!/usr/bin/env bash
# tests/cli/mkbatchfs.sh — the mkbatchfs command line as a user meets it: pack an
# ImageFolder, read it back with --info / --cat / --verify, and every way a user can get
# it wrong (usage errors, corrupt files, unusable sources, interrupted packs).
#
# Run from the repository root by tests/run.sh; BUILD names the build directory
# (default: build). Exit 0 when every check passes, 1 with a FAIL line otherwise.
# Takes about 20 s; the larger folder for the interrupt test dominates.
. "$(dirname "$0")/lib.sh" mkbatchfs
bg_pid=
cli_cleanup_hook() { if [ -n "$bg_pid" ]; then kill -KILL "$bg_pid" 2>/dev/null || true; fi; }
no_temp_files() { # OUT, what
    local left
    left=$(compgen -G "$1.tmp-*" || true)
    [ -z "$left" ] || fail "$2: temporary file left behind: $left"
}
# flip_byte FILE OFFSET: invert every bit of one byte in place
flip_byte() {
    local b
    b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    # shellcheck disable=SC2059
    printf "$(printf '\\%03o' $((b ^ 0xff)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
# expected_order SRC: the files of an ImageFolder in dataset order (docs/format.md):
# classes sorted byte-wise; in a class, directories by full path, then files by name;
# names starting with '.' ignored.
expected_order() {
    local c d
    for c in $(cd "$1" && find . -mindepth 1 -maxdepth 1 -type d ! -name '.*' | sed 's|^\./||' |
        LC_ALL=C sort); do
        find "$1/$c" -mindepth 1 -name '.*' -prune -o -type d -print | { echo "$1/$c"; cat; } |
            LC_ALL=C sort | while IFS= read -r d; do
            find "$d" -mindepth 1 -maxdepth 1 -type f ! -name '.*' | LC_ALL=C sort
        done
    done
}
info_field() { # FILE.bfs NAME: the value after "NAME:" in --info
    "$MK" --info "$1" | sed -n "s/^$2: *//p"
}

[ -x "$MK" ] || fail "$MK not built (run make)"
[ -x "$GEN" ] || fail "$GEN not built (run make all-tests)"

# ---- a source folder with nesting, a hidden file and byte-wise class order -----------
SRC=$T/src
"$GEN" "$SRC" 4 25 24 96 11 >/dev/null || fail "gen_imagefolder failed"
# 'Zebra' sorts before 'class_000' byte-wise (uppercase first), after it in most locales
mv "$SRC/class_002" "$SRC/Zebra"
# Directories are ordered by full path: sub, sub-b, sub/nested ('-' < '/'), which a
# depth-first walk would get wrong.
mkdir -p "$SRC/class_001/sub/nested" "$SRC/class_001/sub-b"
cp "$SRC/class_000/img_00003.jpg" "$SRC/class_001/sub/a.jpg"
cp "$SRC/class_000/img_00004.jpg" "$SRC/class_001/sub/nested/b.jpg"
cp "$SRC/class_000/img_00005.jpg" "$SRC/class_001/sub-b/c.jpg"
cp "$SRC/class_000/img_00006.jpg" "$SRC/class_001/.hidden.jpg" # never data
mapfile -t ORDER < <(expected_order "$SRC")
N=${#ORDER[@]}
[ "$N" -eq 103 ] || fail "test setup: expected 103 source images, found $N"

OUT=$T/out/data.bfs
mkdir -p "$T/out"
run "$MK" --jobs 2 --no-restart "$SRC" "$OUT" # the files' own bytes, for --cat below
expect_rc 0 "packing $SRC"
expect_err "packed 103 samples in 4 classes" "pack summary"
[ -f "$OUT" ] || fail "pack exited 0 but $OUT does not exist"
no_temp_files "$OUT" "successful pack"
ok "pack of 4 classes, 103 images (nested directories, hidden file)"

# ---- --info ----------------------------------------------------------------------------
run "$MK" --info "$OUT"
expect_rc 0 "--info on a good file"
grep -q "^samples: *103 (103 jpeg, 0 raw)$" "$T/stdout" || fail "--info: wrong sample count"
grep -q "^classes: *4$" "$T/stdout" || fail "--info: wrong class count"
want_classes=$'0 25 Zebra\n1 25 class_000\n2 28 class_001\n3 25 class_003'
got_classes=$(sed -n '/^class  samples  name$/,$p' "$T/stdout" | tail -n +2 | awk '{print $1, $2, $3}')
[ "$got_classes" = "$want_classes" ] ||
    fail "--info class table:"$'\n'"$got_classes"$'\n'"expected:"$'\n'"$want_classes"
ok "--info: counts, class names in byte-wise order, per-class counts"

# ---- --cat: every sample, byte-identical, in dataset order -----------------------------
for ((i = 0; i < N; i++)); do
    "$MK" --cat "$OUT" "$i" >"$T/cat" || fail "--cat $i exited non-zero"
    cmp -s "$T/cat" "${ORDER[$i]}" || fail "--cat $i differs from ${ORDER[$i]} (dataset order?)"
done
ok "--cat: all $N samples byte-identical to their sources, in dataset order"

run "$MK" --cat "$OUT" "$N"
expect_rc 1 "--cat with index $N of $N"
expect_err "out of range" "--cat out-of-range index"
expect_err "$OUT" "--cat out-of-range index (file name)"
run "$MK" --cat "$OUT" 12x
expect_rc 2 "--cat with a non-numeric index"
expect_err "--cat index" "--cat non-numeric index"
run "$MK" --cat "$OUT" -1
expect_rc 2 "--cat with a negative index"
expect_err "negative numbers are not accepted" "--cat negative index"
ok "--cat: out-of-range, non-numeric and negative indices fail clearly"

# ---- --verify --------------------------------------------------------------------------
run "$MK" --verify "$OUT"
expect_rc 0 "--verify on a good file"
grep -q "OK (103 samples" "$T/stdout" || fail "--verify: no OK line"

# One flipped payload byte. mkbatchfs puts the heap at 4096 (docs/format.md) and sample 0
# first, so byte 4096+100 is inside sample 0 and page 0.
BAD=$T/flipped.bfs
cp "$OUT" "$BAD"
flip_byte "$BAD" $((4096 + 100))
cmp -s "$OUT" "$BAD" && fail "test setup: flip_byte changed nothing"
run "$MK" --verify "$BAD"
[ "$rc" -ne 0 ] || fail "--verify passed a file with a flipped payload byte"
expect_err "page 0 " "--verify on a flipped byte (names the page)"
expect_err "checksum mismatch" "--verify on a flipped byte"
expect_err "sample 0:" "--verify on a flipped byte (names the sample)"
expect_err "CORRUPT" "--verify on a flipped byte"
run "$MK" --cat "$BAD" 0
expect_rc 1 "--cat of the corrupted sample"
expect_err "checksum" "--cat of the corrupted sample"
[ ! -s "$T/stdout" ] || fail "--cat wrote the bytes of a sample whose checksum fails"
ok "--verify: passes a good file, names the bad page and sample of a flipped byte"

# ---- damaged files: --info fails naming the file ---------------------------------------
TRUNC=$T/truncated.bfs
head -c $(($(stat -c %s "$OUT") / 2)) "$OUT" >"$TRUNC"
run "$MK" --info "$TRUNC"
expect_rc 1 "--info on a truncated file"
expect_err "$TRUNC" "--info on a truncated file (file name)"
expect_err "truncated" "--info on a truncated file"

MAGIC=$T/badmagic.bfs
cp "$OUT" "$MAGIC"
flip_byte "$MAGIC" 1
run "$MK" --info "$MAGIC"
expect_rc 1 "--info on a file with a bad magic number"
expect_err "$MAGIC" "--info on a bad magic number (file name)"
expect_err "magic" "--info on a bad magic number"

GARBAGE=$T/garbage.bin
head -c 20000 /dev/urandom >"$GARBAGE"
printf 'garbage' | dd of="$GARBAGE" conv=notrunc status=none # never the magic by chance
run "$MK" --info "$GARBAGE"
expect_rc 1 "--info on a garbage file"
expect_err "$GARBAGE" "--info on a garbage file (file name)"
expect_err "not a batchfs dataset" "--info on a garbage file"

HEADER=$T/badheader.bfs # a header byte changed: the header checksum catches it
cp "$OUT" "$HEADER"
flip_byte "$HEADER" 17
run "$MK" --info "$HEADER"
expect_rc 1 "--info on a file with a changed header"
expect_err "header checksum" "--info on a changed header"

: >"$T/empty.bfs"
run "$MK" --verify "$T/empty.bfs"
expect_rc 1 "--verify on an empty file"
expect_err "$T/empty.bfs" "--verify on an empty file (file name)"
run "$MK" --info "$T/missing.bfs"
expect_rc 1 "--info on a missing file"
expect_err "$T/missing.bfs" "--info on a missing file (file name)"
ok "--info/--verify: truncated, bad magic, garbage, bad header, empty, missing files fail clearly"

# ---- usage errors exit 2 ---------------------------------------------------------------
usage_case() { # what, args...
    local what=$1
    shift
    run "$MK" "$@"
    expect_rc 2 "usage error ($what)"
    [ -s "$T/stderr" ] || fail "usage error ($what): nothing on stderr"
}
usage_case "no arguments"
usage_case "one argument" "$SRC"
# several sources are WebDataset/TFRecord shards (tests/cli/mkbatchfs_shards.sh, where an
# ImageFolder among them fails with exit 1); elsewhere three arguments are a usage error
usage_case "three arguments with --tokens" --tokens u16 --doc-sep 0 "$SRC" "$T/x.bfs" extra
usage_case "three arguments with --info" --info "$T/x.bfs" extra
usage_case "--jobs 0" --jobs 0 "$SRC" "$T/x.bfs"
usage_case "--jobs abc" --jobs abc "$SRC" "$T/x.bfs"
usage_case "--jobs 1.5" --jobs 1.5 "$SRC" "$T/x.bfs"
usage_case "--quality 0" --quality 0 "$SRC" "$T/x.bfs"
usage_case "--quality 101" --quality 101 "$SRC" "$T/x.bfs"
usage_case "--max-side -3" --max-side -3 "$SRC" "$T/x.bfs"
usage_case "--page-size 3000" --page-size 3000 "$SRC" "$T/x.bfs"
usage_case "--info with two files" --info "$OUT" "$OUT"
usage_case "--info and --verify" --info --verify "$OUT"
usage_case "--cat without index" --cat "$OUT"
usage_case "unknown option" --frobnicate "$SRC" "$T/x.bfs"
expect_err "unknown option --frobnicate" "unknown long option (named)"
usage_case "unknown short option" -z "$SRC" "$T/x.bfs"
expect_err "unknown option -z" "unknown short option (named)"
usage_case "--jobs without a value" "$SRC" "$T/x.bfs" --jobs
expect_err "--jobs needs a value" "option without its value (named)"
run "$MK" --jobs 0 "$SRC" "$T/x.bfs"
expect_err "--jobs" "--jobs 0 (names the option)"
run "$MK" --quality 101 "$SRC" "$T/x.bfs"
expect_err "--quality" "--quality 101 (names the option)"
[ ! -e "$T/x.bfs" ] || fail "a usage error wrote $T/x.bfs"
ok "usage errors exit 2 and name the option"

# ---- determinism across --jobs ---------------------------------------------------------
run "$MK" --quiet --no-fsync --jobs 1 "$SRC" "$T/j1.bfs"
expect_rc 0 "pack --jobs 1"
run "$MK" --quiet --no-fsync --jobs 3 "$SRC" "$T/j3.bfs"
expect_rc 0 "pack --jobs 3"
cmp -s "$T/j1.bfs" "$T/j3.bfs" || fail "--jobs 1 and --jobs 3 give different files"
[ ! -s "$T/stderr" ] || fail "--quiet pack printed to stderr"
run "$MK" --quiet --no-fsync --no-restart --jobs 1 "$SRC" "$T/j1n.bfs"
cmp -s "$T/j1n.bfs" "$OUT" || fail "--no-restart: --jobs 1 and --jobs 2 give different files"
ok "--jobs 1 and 3 (restart markers), 1 and 2 (--no-restart) give byte-identical files; --quiet is quiet"

# ---- directory link loops: refused at once, naming the link ---------------------------
# (two loops made the walk exponential: it ran for minutes, ignoring SIGTERM)
LOOP=$T/loop
mkdir -p "$LOOP/c"
cp "$SRC/class_000/img_00000.jpg" "$LOOP/c/x.jpg"
ln -s .. "$LOOP/c/l1"
ln -s . "$LOOP/_a"
run timeout -s KILL 20 "$MK" --no-fsync "$LOOP" "$T/loop.bfs"
expect_rc 1 "pack of a folder with link loops"
expect_err "a directory link loop (remove the link)" "link loop message"
ok "directory link loops are refused at once, naming the link"

# ---- skipped files, --strict -----------------------------------------------------------
SKIP=$T/skip
cp -r "$SRC" "$SKIP"
echo "not an image" >"$SKIP/class_000/notes.txt"
echo "not an image" >"$SKIP/class_000/fake.jpg"
head -c 20 "$SKIP/class_000/img_00000.jpg" >"$SKIP/class_000/trunc.jpg"
mkdir "$SKIP/.ipynb_checkpoints"
ln -s missing "$SKIP/.dangling" # hidden: never data, and its failed stat fails nothing
run "$MK" --no-fsync "$SKIP" "$T/skip.bfs"
expect_rc 0 "pack with two unusable files"
expect_err "note: 1 file below the class directories is not named .jpg, .jpeg, .png or .webp, so not a sample" "ignored file (count)"
expect_err "e.g. $SKIP/class_000/notes.txt" "ignored file (named)"
expect_err "note: 1 hidden directory beside the class directories (e.g. .ipynb_checkpoints)" "hidden directory note"
expect_err "skipped 2 of 105 files" "skip summary (count)"
expect_err "$SKIP/class_000/fake.jpg: not a JPEG" "skip list (text named .jpg)"
expect_err "$SKIP/class_000/trunc.jpg:" "skip list (truncated .jpg)"
[ "$(info_field "$T/skip.bfs" samples)" = "103 (103 jpeg, 0 raw)" ] ||
    fail "pack with skipped files: wrong sample count"
cmp -s "$T/skip.bfs" "$T/j1.bfs" || fail "skipped files changed the packed output"
ok "files not named as images are noted, unusable .jpg files skipped and listed, the pack succeeds"

run "$MK" --no-fsync --strict "$SKIP" "$T/strict.bfs"
expect_rc 1 "--strict with an unusable file"
expect_err "fake.jpg" "--strict failure (names the file)"
expect_err "--strict" "--strict failure"
[ ! -e "$T/strict.bfs" ] || fail "--strict failure left $T/strict.bfs"
no_temp_files "$T/strict.bfs" "--strict failure"
ok "--strict fails on the first unusable file and leaves nothing behind"

# ---- unusable sources and destinations -------------------------------------------------
EMPTYCLASS=$T/emptyclass
"$GEN" "$EMPTYCLASS" 2 3 16 32 >/dev/null
mkdir "$EMPTYCLASS/class_empty"
run "$MK" --no-fsync "$EMPTYCLASS" "$T/ec.bfs"
expect_rc 1 "an empty class directory"
expect_err "class_empty" "empty class (names it)"
expect_err "holds no .jpg, .jpeg, .png or .webp file" "empty class"
[ ! -e "$T/ec.bfs" ] || fail "empty class: output written"
no_temp_files "$T/ec.bfs" "empty class"

ALLBAD=$T/allbad
"$GEN" "$ALLBAD" 2 3 16 32 >/dev/null
mkdir "$ALLBAD/class_text"
echo "hello" >"$ALLBAD/class_text/readme.jpg"
run "$MK" --no-fsync "$ALLBAD" "$T/ab.bfs"
expect_rc 1 "a class whose files are all unusable"
expect_err "class_text" "class with only unusable files (names it)"
[ ! -e "$T/ab.bfs" ] || fail "class with only unusable files: output written"
no_temp_files "$T/ab.bfs" "class with only unusable files"

mkdir "$T/nothing"
run "$MK" --no-fsync "$T/nothing" "$T/n.bfs"
expect_rc 1 "an empty source directory"
expect_err "$T/nothing" "empty source (names it)"
expect_err "no class sub-directories" "empty source"
run "$MK" --no-fsync "$T/does-not-exist" "$T/n.bfs"
expect_rc 1 "a missing source directory"
expect_err "$T/does-not-exist" "missing source (names it)"
run "$MK" --no-fsync "$SRC" "$T/no-such-dir/out.bfs"
expect_rc 1 "a missing output directory"
expect_err "$T/no-such-dir" "missing output directory (names it)"
[ ! -e "$T/no-such-dir" ] || fail "missing output directory was created"
ok "empty class, all-unusable class, empty or missing source, missing output directory fail clearly"

# ---- --max-side, --raw, --page-size ----------------------------------------------------
run "$MK" --no-fsync --max-side 64 "$SRC" "$T/small.bfs"
expect_rc 0 "pack --max-side 64"
expect_err "re-encoded" "--max-side summary"
size_line=$(info_field "$T/small.bfs" "image size")
wmax='' hmax=''
read -r wmax hmax < <(echo "$size_line" |
    sed -n 's/^width [0-9]*\.\.\([0-9]*\) .*height [0-9]*\.\.\([0-9]*\) .*/\1 \2/p') || true
if [ -z "$wmax" ] || [ -z "$hmax" ]; then fail "--info image size line unparsable: $size_line"; fi
if [ "$wmax" -gt 64 ] || [ "$hmax" -gt 64 ]; then fail "--max-side 64: --info says $size_line"; fi
[ "$wmax" -eq 64 ] || [ "$hmax" -eq 64 ] || fail "--max-side 64 shrank too far: $size_line"
run "$MK" --verify "$T/small.bfs"
expect_rc 0 "--verify after --max-side"
ok "--max-side 64: every image at most 64 px ($size_line)"

run "$MK" --no-fsync --raw --max-side 32 "$SRC" "$T/raw.bfs"
expect_rc 0 "pack --raw"
[ "$(info_field "$T/raw.bfs" samples)" = "103 (0 jpeg, 103 raw)" ] || fail "--raw: not all raw"
run "$MK" --verify "$T/raw.bfs"
expect_rc 0 "--verify of a --raw pack"
ok "--raw packs and verifies"

run "$MK" --no-fsync --restart "$SRC" "$T/rst.bfs"
expect_rc 0 "pack --restart"
grep -Eq "^[0-9]+ of 103 samples are JPEGs with a restart marker after every MCU" "$T/stderr" ||
    fail "--restart: no summary line"
nrst=$(sed -n 's/^\([0-9]*\) of 103 samples are JPEGs.*/\1/p' "$T/stderr")
[ "$nrst" -gt 50 ] || fail "--restart: only $nrst of 103 JPEGs re-encoded"
run "$MK" --verify "$T/rst.bfs"
expect_rc 0 "--verify of a --restart pack"
# sample 0 (4:2:0, baseline): its stored bytes now carry DRI = 1 (FF DD 00 04 00 01)
"$MK" --cat "$T/rst.bfs" 0 | LC_ALL=C grep -qaP '\xff\xdd\x00\x04\x00\x01' ||
    fail "--restart: sample 0 has no restart interval of 1 MCU"
run "$MK" --no-fsync --raw --restart "$SRC" "$T/rr.bfs"
expect_rc 2 "--raw --restart"
expect_err "--restart does not apply" "--raw --restart"
# packing the packed samples again: the same count (marked so already, kept as they are)
mkdir -p "$T/again/c"
for i in 0 1 2; do "$MK" --cat "$T/rst.bfs" $i >"$T/again/c/$i.jpg"; done
run "$MK" --no-fsync --restart "$T/again" "$T/again.bfs"
expect_rc 0 "pack --restart of restart-marked files"
grep -q "^3 of 3 samples are JPEGs with a restart marker" "$T/stderr" ||
    fail "--restart: files marked already not counted"
for i in 0 1 2; do "$MK" --cat "$T/again.bfs" $i | cmp -s - "$T/again/c/$i.jpg" ||
    fail "--restart re-encoded a file marked already"; done
# the default is --restart; --raw alone packs without it; the two flags exclude each other
run "$MK" --no-fsync "$SRC" "$T/default.bfs"
expect_rc 0 "pack with the default options"
grep -q "^$nrst of 103 samples are JPEGs with a restart marker" "$T/stderr" ||
    fail "default pack: no restart summary line"
cmp -s "$T/rst.bfs" "$T/default.bfs" || fail "the default pack differs from --restart"
run "$MK" --no-fsync --restart --no-restart "$SRC" "$T/x.bfs"
expect_rc 2 "--restart --no-restart"
expect_err "--restart and --no-restart exclude each other" "--restart --no-restart"
run "$MK" --no-fsync --raw --max-side 32 "$SRC" "$T/raw-default.bfs"
expect_rc 0 "--raw without --no-restart"
cmp -s "$T/raw.bfs" "$T/raw-default.bfs" || fail "--raw: differs from --raw before"
ok "--restart: $nrst of 103 JPEGs given restart markers, verifies; files marked already kept as they are; refused with --raw; the default, excluded by --no-restart"

# ---- corrupt JPEGs: left out alike in every mode -----------------------------------------
# Damaged copies beside the images: cut short (baseline, progressive, gray: restart packs
# used to store the last two untouched, and any file with --no-restart) and bytes of the
# scan data inverted. Their headers parse: only a whole decode tells.
DMG=$T/damaged
cp -r "$SRC" "$DMG"
for f in 0 6 10; do # 4:2:0 baseline, progressive, gray (gen_imagefolder's kinds)
    img=$(printf '%s/class_000/img_%05d.jpg' "$DMG" "$f")
    head -c $(($(stat -c %s "$img") * 2 / 3)) "$img" >"$DMG/class_000/x-cut-$f.jpg"
done
cp "$DMG/class_003/img_00001.jpg" "$DMG/class_003/x-flipped.jpg"
size=$(stat -c %s "$DMG/class_003/x-flipped.jpg")
for k in 0 5 11 17; do flip_byte "$DMG/class_003/x-flipped.jpg" $((size / 2 + k)); done
for mode in default no-restart max-side raw raw-small; do
    case $mode in
    default) opt=() ref=$T/j1.bfs ;;
    no-restart) opt=(--no-restart) ref=$OUT ;;
    max-side) opt=(--max-side 64) ref=$T/small.bfs ;;
    raw) opt=(--raw) ref= ;;
    raw-small) opt=(--raw --max-side 32) ref=$T/raw.bfs ;;
    esac
    run "$MK" --no-fsync "${opt[@]}" "$DMG" "$T/dmg-$mode.bfs"
    expect_rc 0 "pack with corrupt JPEGs ($mode)"
    expect_err "skipped 4 of 107 files" "corrupt JPEGs ($mode): skip count"
    expect_err "packed 103 samples" "corrupt JPEGs ($mode): sample count"
    for f in 0 6 10; do
        expect_err "$DMG/class_000/x-cut-$f.jpg: corrupt JPEG data (Premature end of JPEG file)" \
            "a JPEG cut short ($mode)"
    done
    expect_err "$DMG/class_003/x-flipped.jpg: corrupt JPEG data (" "a JPEG with bad bytes ($mode)"
    if [ -n "$ref" ] && ! cmp -s "$ref" "$T/dmg-$mode.bfs"; then
        fail "corrupt JPEGs ($mode): the pack differs from the folder's without them"
    fi
    run "$MK" --no-fsync --strict "${opt[@]}" "$DMG" "$T/dmg-strict.bfs"
    expect_rc 1 "--strict with corrupt JPEGs ($mode)"
    expect_err "$DMG/class_000/x-cut-0.jpg: corrupt JPEG data (Premature end of JPEG file) (--strict)" \
        "--strict with corrupt JPEGs ($mode)"
    [ ! -e "$T/dmg-strict.bfs" ] || fail "--strict ($mode) left an output"
done
ok "corrupt JPEGs (cut short, bad bytes; baseline, progressive, gray) are left out and listed alike with the default, --no-restart, --max-side and --raw: the same 103 samples; --strict fails in each"

# ---- a .bfs as the source: re-packing ---------------------------------------------------
run "$MK" --no-fsync --no-restart "$OUT" "$T/copy.bfs"
expect_rc 0 "re-pack of a .bfs"
cmp -s "$OUT" "$T/copy.bfs" || fail "re-packing a .bfs with --no-restart changed its bytes"
run "$MK" --no-fsync "$OUT" "$T/rst2.bfs"
expect_rc 0 "re-pack of a .bfs (upgrade to restart markers)"
cmp -s "$T/rst.bfs" "$T/rst2.bfs" || fail "re-packing the .bfs differs from --restart of the folder"
run "$MK" --no-fsync "$T/rst2.bfs" "$T/rst3.bfs"
cmp -s "$T/rst.bfs" "$T/rst3.bfs" || fail "re-packing an upgraded .bfs changed it"
run "$MK" --no-fsync "$T/raw.bfs" "$T/raw2.bfs" # raw samples: nothing to restart
expect_rc 0 "re-pack of a --raw .bfs"
cmp -s "$T/raw.bfs" "$T/raw2.bfs" || fail "re-packing raw samples changed them"
run "$MK" --no-fsync "$BAD" "$T/bad2.bfs"
expect_rc 0 "re-pack of a .bfs with a corrupt sample"
expect_err "$BAD[0]: sample checksum mismatch" "re-pack: the corrupt sample named"
[ "$(info_field "$T/bad2.bfs" samples)" = "102 (102 jpeg, 0 raw)" ] ||
    fail "re-pack: the corrupt sample was not skipped"
run "$MK" --no-fsync --strict "$BAD" "$T/bad3.bfs"
expect_rc 1 "--strict re-pack of a .bfs with a corrupt sample"
[ ! -e "$T/bad3.bfs" ] || fail "--strict re-pack left an output"
run "$MK" --no-fsync "${ORDER[0]}" "$T/notbfs.bfs"
expect_rc 1 "a JPEG file as SRC"
expect_err "must be a .bfs dataset" "a JPEG file as SRC"
# a label changed in the sample table: only the tables' checksum covers it
table=$(od -An -tu8 -j 56 -N8 "$OUT" | tr -d ' ')
cp "$OUT" "$T/label.bfs"
printf '\007' | dd of="$T/label.bfs" bs=1 seek=$((table + 32 * 5 + 12)) conv=notrunc status=none
run "$MK" --no-fsync "$T/label.bfs" "$T/label2.bfs"
expect_rc 1 "re-pack of a .bfs with a corrupt label"
expect_err "table checksum mismatch" "re-pack: corrupt tables"
[ ! -e "$T/label2.bfs" ] || fail "re-pack of corrupt tables left an output"
ok "a .bfs as SRC: re-packed identically with --no-restart, upgraded by default as from the folder (and idempotent); raw samples kept; a corrupt sample skipped and named (--strict fails); corrupt tables and a non-.bfs file refused"

run "$MK" --quiet --no-fsync --no-restart --page-size 4K "$SRC" "$T/p4k.bfs"
expect_rc 0 "pack --page-size 4K"
grep -q "pages of 4 KiB" < <("$MK" --info "$T/p4k.bfs") || fail "--page-size 4K not used"
run "$MK" --verify "$T/p4k.bfs"
expect_rc 0 "--verify with 4 KiB pages"
"$MK" --cat "$T/p4k.bfs" 50 | cmp -s - "${ORDER[50]}" || fail "--cat with 4 KiB pages"
ok "--page-size 4K packs and verifies"

# ---- interruption ----------------------------------------------------------------------
# Re-encoding (--max-side) with one job makes the pack last a few seconds, so SIGINT
# after 0.3 s lands in the middle of it; a very fast machine may finish first.
BIG=$T/big
"$GEN" "$BIG" 8 75 300 600 >/dev/null
interrupt_case() { # signal
    local sig=$1 out=$T/out/big-$1.bfs saw_temp=no
    "$MK" --no-fsync --jobs 1 --max-side 128 "$BIG" "$out" >"$T/stdout" 2>"$T/stderr" &
    bg_pid=$!
    sleep 0.3
    if compgen -G "$out.tmp-*" >/dev/null; then saw_temp=yes; fi
    kill -"$sig" "$bg_pid" 2>/dev/null || true
    set +e
    wait "$bg_pid"
    rc=$?
    set -e
    bg_pid=
    if [ "$rc" -eq 130 ]; then
        [ ! -e "$out" ] || fail "SIG$sig: exit 130 but $out exists"
        no_temp_files "$out" "SIG$sig"
        expect_err "interrupted" "SIG$sig message"
        expect_err "$out not written" "SIG$sig message (names the output)"
        ok "SIG$sig during a pack: exit 130, no output, no temporary file (temp seen: $saw_temp)"
    elif [ "$rc" -eq 0 ]; then
        echo "note: the pack finished before SIG$sig arrived; checking its output instead"
        no_temp_files "$out" "pack that outran SIG$sig"
        run "$MK" --verify "$out"
        expect_rc 0 "--verify of a pack that outran SIG$sig"
        ok "SIG$sig after a pack finished: complete, verified output"
    else
        fail "SIG$sig during a pack: exit status $rc, expected 130"
    fi
}
interrupt_case INT
interrupt_case TERM

# ---- --help, --version -----------------------------------------------------------------
run "$MK" --help
expect_rc 0 "--help"
for opt in --jobs --max-side --quality --raw --restart --no-restart --strict --tokens --doc-sep --page-size --no-fsync --quiet \
    --info --cat --verify --help --version; do
    grep -qF -- "$opt" "$T/stdout" || fail "--help does not mention $opt"
done
run "$MK" -h
expect_rc 0 "-h"
run "$MK" --version
expect_rc 0 "--version"
grep -Eq '^mkbatchfs [0-9]+\.[0-9]+\.[0-9]+' "$T/stdout" || fail "--version prints no version"
ok "--help lists every option; --version prints $(head -n1 "$T/stdout")"

echo "all mkbatchfs CLI checks passed"
