#!/usr/bin/env bash
# tests/cli/gpu_lib.sh — libbatchfs-gpu as a user links it:
#   1. build/libbatchfs-gpu.so has no link-time CUDA dependency (readelf -d: no libcuda,
#      no libcudart), soname libbatchfs-gpu.so.1, and exports exactly the bfsg_* API
#      (the engine code it contains stays local), in the .so and in the .a;
#   2. a program using only the header links against the static archive and against the
#      shared library through the pkg-config file, and runs: the CPU fallback on a
#      directory with one batch file written by st_tool;
#   3. the conversion kernel gpu/convert.ptx assembles with ptxas for sm_75 and sm_90
#      where the CUDA toolkit is installed (said when it is not).
# Run: BUILD=build bash tests/cli/gpu_lib.sh (tests/run.sh does). About 3 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
T=$(mktemp -d) && trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

so=$B/libbatchfs-gpu.so
[ -f "$so" ] && [ -f "$B/libbatchfs-gpu.a" ] && [ -f "$B/batchfs-gpu.pc" ] || fail "library not built"
readelf -d "$so" | grep NEEDED | grep -qi cuda && fail "links against CUDA: $(readelf -d "$so" | grep NEEDED)"
readelf -d "$so" | grep -q 'SONAME.*libbatchfs-gpu.so.1' || fail "soname"
api=$(grep -oE '^[a-z_ ]*\**(bfsg_[a-z_]+)\(' gpu/batchfs_gpu.h | grep -oE 'bfsg_[a-z_]+' | sort -u)
exported=$(nm -D --defined-only "$so" | awk '{print $3}' | sort -u)
[ "$api" = "$exported" ] || fail "exports differ from the header's API: $(diff <(echo "$api") <(echo "$exported") | tr '\n' ' ')"
global_a=$(nm -g --defined-only "$B/libbatchfs-gpu.a" | awk 'NF == 3 {print $3}' | sort -u)
[ "$global_a" = "$api" ] || fail "static archive globals differ: $(diff <(echo "$api") <(echo "$global_a") | tr '\n' ' ')"
echo "ok: no CUDA at link time; $(echo "$api" | wc -l) exported functions, all bfsg_*"

# 2. a user's program
mkdir -p "$T/inc/batchfs" "$T/d/epoch/0"
cp gpu/batchfs_gpu.h "$T/inc/"
"$B/tests/st_tool" write -e 0 -k 0 "$T/d/epoch/0/batch_0" u8 nhwc 3 5 7 >/dev/null
cat >"$T/user.c" <<'C'
#include <batchfs_gpu.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    bfsg_loader *l;
    bfsg_batch *b;
    if (bfsg_create(BFSG_API_VERSION, &l) || bfsg_set(l, "device", "cpu") || bfsg_open(l, argv[1]))
        return fprintf(stderr, "%s\n", l ? bfsg_error(l) : "create"), 1;
    int n = 0;
    while (bfsg_next(l, &b) == 0 && b) {
        const unsigned char *px = b->tensors[0].data;
        const long long *lab = b->tensors[1].data;
        printf("%s %s [%lld,%lld,%lld,%lld] %u %lld\n", b->path + argc - argc, b->tensors[0].name,
               (long long)b->tensors[0].shape[0], (long long)b->tensors[0].shape[1],
               (long long)b->tensors[0].shape[2], (long long)b->tensors[0].shape[3], px[10], lab[2]);
        n++;
    }
    bfsg_destroy(l);
    return n == 1 ? 0 : 1;
}
C
# a sanitizer build's .a needs the sanitizer's runtime (make SANITIZER=...)
san= syms=$(nm "$B/libbatchfs-gpu.a" 2>/dev/null)
grep -q ' U __ubsan_' <<<"$syms" && san="$san -fsanitize=undefined"
grep -q ' U __asan_' <<<"$syms" && san="$san -fsanitize=address"
grep -q ' U __tsan_' <<<"$syms" && san="$san -fsanitize=thread"
# (the .a's dependencies are the .pc's Libs.private: libxxhash for the pipeline's hashes)
cc -Wall -Werror -I"$T/inc" "$T/user.c" "$B/libbatchfs-gpu.a" -lxxhash -lm -lpthread $san -o "$T/user_static"
"$T/user_static" "$T/d" >"$T/out" || fail "static: $(cat "$T/out")"
grep -q 'images \[3,5,7,3\] 10 2$' "$T/out" || fail "static program read: $(cat "$T/out")"
sed "s|^prefix=.*|prefix=$PWD/$B|; s|^libdir=.*|libdir=$PWD/$B|; s|^includedir=.*|includedir=$T/inc|" \
    "$B/batchfs-gpu.pc" >"$T/batchfs-gpu.pc"
flags=$(PKG_CONFIG_PATH=$T pkg-config --cflags --libs batchfs-gpu)
cc -Wall -Werror "$T/user.c" $flags $san -o "$T/user_shared"
LD_LIBRARY_PATH=$PWD/$B "$T/user_shared" "$T/d" >"$T/out2" || fail "shared: $(cat "$T/out2")"
cmp -s "$T/out" "$T/out2" || fail "static and shared programs differ"
echo "ok: a program links the .a and, through pkg-config, the .so, and reads the batch"

# 3. the kernel
ptxas=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
if [ -x "$ptxas" ]; then
    for arch in sm_75 sm_90; do
        "$ptxas" --gpu-name $arch gpu/convert.ptx -o "$T/k.cubin" || fail "ptxas $arch rejects gpu/convert.ptx"
    done
    echo "ok: gpu/convert.ptx assembles for sm_75 and sm_90 ($("$ptxas" --version | tail -1))"
else
    echo "note: no ptxas here (CUDA toolkit not installed): gpu/convert.ptx not assembled"
fi
echo "gpu_lib: all checks passed"
