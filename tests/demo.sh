#!/usr/bin/env bash
# tests/demo.sh — `make demo`: the main job end to end on a small generated dataset.
# Today: generate a synthetic ImageFolder, pack it, describe it, verify it, and show that
# a stored sample is byte-identical to its source file. (Mounting arrives with fs/.)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEMO_DIR=${DEMO_DIR:-$BUILD/demo}
rm -rf "$DEMO_DIR" && mkdir -p "$DEMO_DIR"

echo "== 1. a small ImageFolder: 4 classes x 64 synthetic JPEGs (160..400 px) =="
"$BUILD/tests/gen_imagefolder" "$DEMO_DIR/images" 4 64 160 400 1
du -sh "$DEMO_DIR/images" | sed 's/^/   /'

echo "== 2. pack it: mkbatchfs $DEMO_DIR/images $DEMO_DIR/demo.bfs =="
"$BUILD/mkbatchfs" "$DEMO_DIR/images" "$DEMO_DIR/demo.bfs"

echo "== 3. describe it: mkbatchfs --info =="
"$BUILD/mkbatchfs" --info "$DEMO_DIR/demo.bfs"

echo "== 4. verify every checksum: mkbatchfs --verify =="
"$BUILD/mkbatchfs" --verify "$DEMO_DIR/demo.bfs"

echo "== 5. random access: sample 130 is class_002/img_00002.jpg, byte for byte =="
"$BUILD/mkbatchfs" --cat "$DEMO_DIR/demo.bfs" 130 > "$DEMO_DIR/sample130.jpg"
cmp "$DEMO_DIR/sample130.jpg" "$DEMO_DIR/images/class_002/img_00002.jpg"
echo "   identical ($(stat -c %s "$DEMO_DIR/sample130.jpg") bytes)"
echo
echo "demo OK. Files are in $DEMO_DIR/."
