#!/usr/bin/env bash
# make_corpus.sh [OUT_DIR] [CLASSES] [PER_CLASS] — build the ImageNet-like JPEG benchmark
# corpus (OUT_DIR/<class>/<file>.jpg, ~93 KB per image, sides 250..500) from the real
# photographs in two Debian wallpaper packages.
#
#   OUT_DIR    default /var/tmp/batchfs-corpus
#   CLASSES    default 20
#   PER_CLASS  default 100
#
# Environment:
#   BFS_CORPUS_CACHE  where the wallpaper packages are unpacked and kept
#                     (default /var/tmp/batchfs-corpus-src; reused when complete)
#   BFS_CORPUS_FLAGS  extra mkcorpus options, e.g. "--seed 7 --progressive-every 4"
#   BUILD             build directory (default build); mkcorpus goes to $BUILD/bench/
#   CC                C compiler (default cc)
#
# Steps: install missing build tools (apt-get, only if something is missing); download
# plasma-workspace-wallpapers and mate-backgrounds with `apt-get download` and unpack them
# with `dpkg -x` (not installed system-wide); copy the photographs among them into
# $CACHE/photos; compile mkcorpus; generate. A corpus whose .complete stamp
# matches (sizes, flags, generator source, photographs) is kept as it is.
#
# Needs (Debian): apt-get, dpkg, a C compiler (gcc), pkg-config, libturbojpeg0-dev. No
# libpng: the photographs are all JPEG; the PNGs in these packages are rendered artwork.
# Works non-interactively (CI=true, no stdin); run from the repository root.
set -euo pipefail

die() { echo "make_corpus.sh: error: $*" >&2; exit 1; }
log() { echo "make_corpus.sh: $*" >&2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT_DIR=${1:-/var/tmp/batchfs-corpus}
CLASSES=${2:-20}
PER_CLASS=${3:-100}
CACHE=${BFS_CORPUS_CACHE:-/var/tmp/batchfs-corpus-src}
FLAGS=${BFS_CORPUS_FLAGS:-}
BUILD=${BUILD:-build}
CC=${CC:-cc}
PACKAGES=(plasma-workspace-wallpapers mate-backgrounds)

# The photographs (paths inside the unpacked packages). Both packages also ship abstract
# renders and illustrations; their smooth gradients decode far faster than photographs,
# so they are left out on purpose.
PHOTOS=(
    usr/share/backgrounds/mate/nature/Aqua.jpg
    usr/share/backgrounds/mate/nature/Blinds.jpg
    usr/share/backgrounds/mate/nature/Dune.jpg
    usr/share/backgrounds/mate/nature/FreshFlower.jpg
    usr/share/backgrounds/mate/nature/Garden.jpg
    usr/share/backgrounds/mate/nature/GreenMeadow.jpg
    usr/share/backgrounds/mate/nature/LadyBird.jpg
    usr/share/backgrounds/mate/nature/RainDrops.jpg
    usr/share/backgrounds/mate/nature/Storm.jpg
    usr/share/backgrounds/mate/nature/TwoWings.jpg
    usr/share/backgrounds/mate/nature/Wood.jpg
    usr/share/backgrounds/mate/nature/YellowFlower.jpg
    usr/share/wallpapers/BytheWater/contents/images/2560x1600.jpg
    usr/share/wallpapers/ColdRipple/contents/images/2560x1600.jpg
    usr/share/wallpapers/ColorfulCups/contents/images/2560x1600.jpg
    usr/share/wallpapers/DarkestHour/contents/images/2560x1600.jpg
    usr/share/wallpapers/EveningGlow/contents/images/2560x1600.jpg
    usr/share/wallpapers/FallenLeaf/contents/images/2560x1600.jpg
    usr/share/wallpapers/Grey/contents/images/2560x1600.jpg
    usr/share/wallpapers/Kite/contents/images/2560x1600.jpg
    usr/share/wallpapers/OneStandsOut/contents/images/2560x1600.jpg
    usr/share/wallpapers/Path/contents/images/2560x1600.jpg
    usr/share/wallpapers/summer_1am/contents/images/2560x1600.jpg
)
MIN_PHOTOS=10

[[ $CLASSES =~ ^[1-9][0-9]*$ ]] || die "CLASSES must be a positive integer, got '$CLASSES'"
[[ $PER_CLASS =~ ^[1-9][0-9]*$ ]] || die "PER_CLASS must be a positive integer, got '$PER_CLASS'"
[[ $OUT_DIR != / ]] || die "OUT_DIR must not be /"
OUT_DIR=${OUT_DIR%/}

# Runs a command as root: directly, or through passwordless sudo.
as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        die "need root (or passwordless sudo) to run: $*"
    fi
}

apt_updated=0
apt_update_once() {
    if [[ $apt_updated -eq 0 ]]; then
        log "apt-get update"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null >&2
        apt_updated=1
    fi
}

# Installs the Debian packages for whatever build tool is missing.
ensure_tools() {
    local missing=()
    command -v apt-get >/dev/null || die "apt-get not found (this script needs Debian or Ubuntu)"
    command -v dpkg >/dev/null || die "dpkg not found"
    command -v "$CC" >/dev/null || missing+=(gcc libc6-dev)
    command -v pkg-config >/dev/null || missing+=(pkg-config)
    if ! command -v pkg-config >/dev/null || ! pkg-config --exists libturbojpeg; then
        missing+=(libturbojpeg0-dev)
    fi
    [[ ${#missing[@]} -eq 0 ]] && return
    log "installing ${missing[*]}"
    apt_update_once
    as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null >&2
}

# apt-get download as root warns that the _apt sandbox user cannot write the directory;
# downloading as root into a private temporary directory is fine.
apt_download() {
    local opts=()
    [[ $(id -u) -eq 0 ]] && opts=(-o APT::Sandbox::User=root)
    apt-get download -q "${opts[@]}" "$@" </dev/null >&2
}

# Downloads and unpacks the wallpaper packages and copies the photographs into
# $CACHE/photos (~15 MB; the rest is dropped). Skipped when $CACHE/.complete exists.
fetch_photos() {
    [[ -f $CACHE/.complete && -d $CACHE/photos ]] && return
    log "fetching ${PACKAGES[*]} into $CACHE"
    mkdir -p "$CACHE"
    rm -rf "$CACHE/root" "$CACHE/photos" "$CACHE/debs" "$CACHE/.complete"
    mkdir -p "$CACHE/debs" "$CACHE/root" "$CACHE/photos"
    if ! (cd "$CACHE/debs" && apt_download "${PACKAGES[@]}"); then
        apt_update_once
        (cd "$CACHE/debs" && apt_download "${PACKAGES[@]}") ||
            die "apt-get download ${PACKAGES[*]} failed"
    fi
    local deb
    for deb in "$CACHE"/debs/*.deb; do
        dpkg -x "$deb" "$CACHE/root" || die "dpkg -x $deb failed"
    done
    local p n=0 name
    for p in "${PHOTOS[@]}"; do
        if [[ ! -f $CACHE/root/$p ]]; then
            log "warning: $p not in the packages (skipped)"
            continue
        fi
        # a flat, unique name: mate-Aqua.jpg, plasma-BytheWater.jpg
        case $p in
        usr/share/backgrounds/mate/*) name=mate-$(basename "$p") ;;
        usr/share/wallpapers/*) name=${p#usr/share/wallpapers/}; name=plasma-${name%%/*}.jpg ;;
        *) name=$(basename "$p") ;;
        esac
        cp "$CACHE/root/$p" "$CACHE/photos/$name"
        n=$((n + 1))
    done
    [[ $n -ge $MIN_PHOTOS ]] || die "only $n of ${#PHOTOS[@]} photographs found in ${PACKAGES[*]}"
    rm -rf "$CACHE/debs" "$CACHE/root"
    touch "$CACHE/.complete"
    log "$n photographs in $CACHE/photos"
}

# Compiles mkcorpus when it is missing or older than its source.
build_mkcorpus() {
    MKCORPUS=$BUILD/bench/mkcorpus
    local src=$HERE/mkcorpus.c
    if [[ -x $MKCORPUS && $MKCORPUS -nt $src ]]; then
        return
    fi
    mkdir -p "$BUILD/bench"
    log "compiling $MKCORPUS"
    # shellcheck disable=SC2046  # pkg-config output is a list of flags
    "$CC" -std=c11 -O2 -Wall -Wextra -D_GNU_SOURCE $(pkg-config --cflags libturbojpeg) \
        -o "$MKCORPUS.tmp" "$src" $(pkg-config --libs libturbojpeg) -lm
    mv -f "$MKCORPUS.tmp" "$MKCORPUS"
}

# What the corpus depends on; a corpus with the same stamp is not regenerated.
corpus_stamp() {
    echo "classes=$CLASSES per_class=$PER_CLASS flags=$FLAGS"
    echo "generator=$(sha256sum <"$HERE/mkcorpus.c" | cut -d' ' -f1)"
    echo "photos=$(cd "$CACHE/photos" && for f in *.jpg; do
        echo "$f $(stat -c %s "$f")"
    done | sha256sum | cut -d' ' -f1)"
}

generate() {
    local stamp
    stamp=$(corpus_stamp)
    if [[ -f $OUT_DIR/.complete && $(cat "$OUT_DIR/.complete") == "$stamp" ]]; then
        log "$OUT_DIR is up to date (remove $OUT_DIR/.complete to regenerate)"
        return
    fi
    # Only ever delete a directory this script made (stamped) or an empty one.
    if [[ -e $OUT_DIR && ! -f $OUT_DIR/.complete ]] &&
        [[ -n $(ls -A "$OUT_DIR" 2>/dev/null) || ! -d $OUT_DIR ]]; then
        die "$OUT_DIR exists and is not a corpus made by this script; remove it or pick another"
    fi
    local tmp=$OUT_DIR.partial
    rm -rf "$tmp" "$tmp.stats"
    log "generating $CLASSES x $PER_CLASS images into $OUT_DIR"
    # shellcheck disable=SC2086  # FLAGS is a list of options
    "$MKCORPUS" --classes "$CLASSES" --per-class "$PER_CLASS" $FLAGS "$CACHE/photos" "$tmp" \
        | tee "$tmp.stats"
    mv "$tmp.stats" "$tmp/.stats"
    echo "$stamp" >"$tmp/.complete"
    rm -rf "$OUT_DIR"
    mv "$tmp" "$OUT_DIR"
    log "done: $OUT_DIR"
}

ensure_tools
mkdir -p "$(dirname "$CACHE")"
# One run at a time per cache (concurrent CI jobs share /var/tmp).
if command -v flock >/dev/null; then
    exec 9>"$CACHE.lock"
    flock 9
fi
fetch_photos
build_mkcorpus
generate
