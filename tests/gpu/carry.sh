#!/usr/bin/env bash
# tests/gpu/carry.sh [DIR] — prepare DIR (default .devgpu, which .git/info/exclude must
# ignore) for tests/gpu/run.sh on a lent GPU machine that has a driver but none of the
# -dev packages `make deps` installs: the programs and test tools built here (make
# all-tests first), and the shared libraries they need that such a machine lacks. There:
#   export LD_LIBRARY_PATH=$PWD/DIR/build:$PWD/DIR/lib PATH=$PWD/DIR/lib:$PATH
#   bash tests/gpu/run.sh DIR/build
# (run.sh finds make failing and uses the binaries). About 7 MB.
set -euo pipefail
cd "$(dirname "$0")/../.."
D=${1:-.devgpu}
B=${BUILD:-build}
for f in batchfs mkbatchfs libbatchfs-gpu.so.1 tests/gpu_tool tests/engine_tool tests/gen_imagefolder; do
    [ -e "$B/$f" ] || { echo "carry: $B/$f is missing: run 'make all-tests' first" >&2; exit 1; }
done
git check-ignore -q "$D" || { echo "carry: $D is not ignored by git (add /$D/ to .git/info/exclude)" >&2; exit 1; }
rm -rf "$D"
mkdir -p "$D/build/tests" "$D/lib"
cp -a "$B"/batchfs "$B"/mkbatchfs "$B"/libbatchfs-gpu.so "$B"/libbatchfs-gpu.so.1 "$D/build/"
cp -a "$B"/tests/gpu_tool "$B"/tests/engine_tool "$B"/tests/gen_imagefolder "$D/build/tests/"
# every library the programs load that is not the C library's own, and fusermount3
ldd "$B"/batchfs "$B"/mkbatchfs "$B"/tests/gpu_tool "$B"/tests/engine_tool "$B"/tests/gen_imagefolder |
    awk '/=> \// {print $3}' | sort -u | grep -v -e '/libc\.so' -e '/libm\.so' -e '/libpthread' \
    -e '/libdl\.so' -e '/librt\.so' -e 'libbatchfs-gpu' | while read -r lib; do cp -L "$lib" "$D/lib/"; done
cp -L "$(command -v fusermount3)" "$D/lib/" 2>/dev/null || true
echo "carry: $D ($(du -sh "$D" | cut -f1)): $(ls "$D/lib" | tr '\n' ' ')"
