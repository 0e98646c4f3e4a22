#!/usr/bin/env bash
# tests/bench/bench_peers.sh CORPUS — batchfs against the two strongest CPU peers on the
# same JPEGs and cores, in one run (issue 19):
#   - NVIDIA DALI without a GPU (device_id=None; fn.readers.file with a full reshuffle per
#     epoch, decoders.image_random_crop: region decode, resize, flip);
#   - torchvision io.decode_jpeg + transforms.v2.RandomResizedCrop + RandomHorizontalFlip
#     in a DataLoader;
#   - PyTorch's usual recipe, ImageFolder (PIL) + RandomResizedCrop + flip, for reference;
#   - batchfs: the corpus packed by default (restart markers), mounted, read batch by batch
#     with read() into one buffer, and on a second fresh mount with each batch mmap'ed
#     (zero-copy, one byte per page touched: as torch.frombuffer over a mapping);
# All: batches of 256, RandomResizedCrop 224 (scale 0.08..1, ratio 3/4..4/3) + flip, uint8,
# `nproc` workers/threads, one warm-up epoch (BFS_PEERS_WARMUP_BATCHES=N: at least N
# batches) then the median of 3 epochs (tests/bench/peers.py); batchfs's first epoch, on
# a fresh mount, is shown on its own against the full decode (issue 36's second target). Prints images/s, each timed epoch's and their spread (max - min
# over the median: how steady each pipeline is), images per CPU second (every process of the
# pipeline, batchfs's daemon included) and batchfs / each peer for both, and the mount's
# images/s per core and `batchfs --bench`'s images per CPU second against libjpeg-turbo's
# full decode of the original files on one core (`batchfs --bench` of a --no-restart pack
# gives that rate). Asserts nothing.
#
# The peers live in a venv, $BFS_PEERS_VENV (default /var/tmp/venv-peers), made here when
# missing: torch, torchvision and nvidia-dali-cuda120 from PyPI (~5 GB with the CUDA wheels
# torch pulls in; DALI's CPU operators need no GPU). When it cannot be made (no network),
# the peers are skipped with the reason and the script exits 0. BFS_PEERS_OPTS adds mount
# options to batchfs's mounts (e.g. huge_pages=0).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
corpus=${1:?usage: bench_peers.sh CORPUS_DIR}
venv=${BFS_PEERS_VENV:-/var/tmp/venv-peers}
workers=$(nproc)
work=$(mktemp -d "${TMPDIR:-/tmp}/batchfs-bpeers.XXXXXX")
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() { fusermount3 -u "$mnt" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

peers_ok() { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import torch, torchvision, nvidia.dali" 2>/dev/null; }
if ! peers_ok; then
    echo "making $venv (torch, torchvision, nvidia-dali-cuda120 from PyPI; a few minutes)"
    if ! python3 -m venv --help >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null
    fi
    if ! { python3 -m venv "$venv" &&
           "$venv/bin/pip" install -q --progress-bar off torch torchvision nvidia-dali-cuda120; } \
        >"$work/pip.log" 2>&1 || ! peers_ok; then
        echo "peers skipped: could not make $venv:"
        tail -3 "$work/pip.log" | sed 's/^/  /'
        exit 0
    fi
fi
echo "peers: $("$venv/bin/python" -c "import torch, torchvision, nvidia.dali as d; print('torch', torch.__version__, 'torchvision', torchvision.__version__, 'DALI', d.__version__)")"

"$BUILD/mkbatchfs" --quiet --no-fsync "$corpus" "$work/c.bfs"
"$BUILD/mkbatchfs" --quiet --no-fsync --no-restart "$corpus" "$work/plain.bfs"
files=$(find "$corpus" -type f -name '*.jpg' | wc -l)
echo "corpus $corpus: $files JPEGs, $workers workers/threads, batches of 256"

# the reference: libjpeg-turbo's full decode of the original files on one core
ref=$("$BUILD/batchfs" --bench "$work/plain.bfs" -o batch=256,size=224,threads=1 --batches 4 --reference 400 --json)
ref_ips=$(field "$ref" decode_limit_images_per_s_core)
ref_cpu=$(field "$ref" decode_limit_images_per_cpu_s)
# and the engine in-process (--bench, every core) on the default pack, in CPU time
eng=$("$BUILD/batchfs" --bench "$work/c.bfs" -o batch=256,size=224 --batches 14 --reference 1 --json)

run_peer() { "$venv/bin/python" tests/bench/peers.py "$1" "$corpus" 256 "$workers" 2>"$work/$1.err" ||
             { echo "$1 failed:" >&2; tail -5 "$work/$1.err" >&2; echo '{}'; }; }
dali=$(run_peer dali)
tv=$(run_peer torchvision)
pil=$(run_peer pil)

run_batchfs() { # KIND: a fresh mount, read by peers.py as KIND
    "$BUILD/batchfs" "$work/c.bfs" "$mnt" -o "batch=256,size=224${BFS_PEERS_OPTS:+,$BFS_PEERS_OPTS}"
    for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
    local pid
    pid=$(pgrep -n -f "batchfs $work/c.bfs $mnt") # the daemon (it forked into the background)
    python3 tests/bench/peers.py "$1" "$mnt" 256 "$workers" "$pid"
    fusermount3 -u "$mnt"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
}
bfs=$(run_batchfs batchfs)
bfs_map=$(run_batchfs batchfs-mmap)

show() { # name json
    if [ "$2" = '{}' ]; then printf '%-40s failed (see above)\n' "$1"; return; fi
    printf '%-40s %7.0f images/s  %7.0f images per CPU second  epochs %s, spread %.0f%% (after %s warm-up epochs)\n' "$1" \
        "$(field "$2" images_per_s)" "$(field "$2" images_per_cpu_s)" \
        "$(python3 -c "import json,sys; print('/'.join(map(str, json.loads(sys.argv[1])['epochs_images_per_s'])))" "$2")" \
        "$(awk -v s="$(field "$2" spread)" 'BEGIN{print 100*s}')" "$(field "$2" warmup_epochs)"
}
show "DALI CPU (image_random_crop)" "$dali"
show "torchvision decode_jpeg + v2" "$tv"
show "PyTorch ImageFolder + PIL" "$pil"
show "batchfs mount (default packing)" "$bfs"
show "batchfs mount, mmap'ed batches" "$bfs_map"
b_ips=$(field "$bfs" images_per_s); b_cpu=$(field "$bfs" images_per_cpu_s)
for peer in dali tv pil; do
    j=${!peer}
    [ "$j" != '{}' ] || continue
    case $peer in
    dali) name="DALI CPU" target=" (target >= 3.5 per wall second, issue 36)" ;;
    tv) name="torchvision decode_jpeg" target=" (target >= 3.5 per wall second, issue 36)" ;;
    pil) name="PyTorch ImageFolder + PIL" target="" ;;
    esac
    echo "batchfs / $name: $(ratio "$b_ips" "$(field "$j" images_per_s)") per wall second, $(ratio "$b_cpu" "$(field "$j" images_per_cpu_s)") per CPU second$target"
    echo "   with mmap'ed batches (zero-copy reader): $(ratio "$(field "$bfs_map" images_per_s)" "$(field "$j" images_per_s)") per wall second, $(ratio "$(field "$bfs_map" images_per_cpu_s)" "$(field "$j" images_per_cpu_s)") per CPU second"
done
echo "libjpeg-turbo full decode of the original files, 1 core: $ref_ips images/s ($ref_cpu per CPU second)"
echo "batchfs --bench, default pack, all cores: $(field "$eng" images_per_cpu_s) images per CPU second: / full decode $(ratio "$(field "$eng" images_per_cpu_s)" "$ref_cpu")"
echo "mount images/s per core / full decode per core: $(ratio "$(awk -v a="$b_ips" -v n="$workers" 'BEGIN{print a/n}')" "$ref_ips"); per CPU second: $(ratio "$b_cpu" "$ref_cpu") (target >= 2.0, issue 36)"
if [ "$bfs" != '{}' ]; then
    f_ips=$(field "$bfs" first_epoch_images_per_s); f_cpu=$(field "$bfs" first_epoch_images_per_cpu_s)
    echo "   first epoch of the fresh mount: $f_ips images/s, $f_cpu per CPU second: / full decode $(ratio "$f_cpu" "$ref_cpu") (target >= 2.0, issue 36)"
fi
