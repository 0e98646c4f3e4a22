"""gen_codec.py SRC DST [--corrupt] — PNG and WebP test files made from real-photo-like JPEGs.

For every JPEG below SRC (an ImageFolder, e.g. gen_imagefolder's), write under DST, in the
same class directories, one file per variant (name: STEM-VARIANT.png / .webp), each kind of
PNG and WebP the decoders must read as Pillow does:
  PNG: rgb8, rgba8, rgb16, rgba16, gray8, gray16, gray1, graya8, graya16, pal8, pal8t
       (palette with tRNS), pal4, interlaced (Adam7 rgb8), rgbt (RGB with tRNS)
  WebP: lossy, lossless, lossya (lossy with alpha), losslessa
Pillow writes what it can; 16-bit colour, gray+alpha 16, interlaced and tRNS-on-RGB PNGs
(which Pillow cannot write) are written here chunk by chunk (zlib, the PNG spec's CRC), with
samples spread over the whole 16-bit range so a decoder that scales instead of taking the
high byte (or clipping 16-bit gray, as Pillow does) is caught.
With --corrupt: also bad/STEM-cut.png, -cut.webp (truncated), -crc.png (an IDAT byte
flipped), -bits.webp (bitstream bytes flipped), which Pillow refuses too; the script checks
that Pillow does.
"""
import io
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image


def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)


def png_bytes(arr, ct, depth, trns=None, interlace=False):
    """arr: HxWxC array of uint8 or >u2 samples as stored."""
    h, w = arr.shape[:2]
    a = np.ascontiguousarray(arr.astype(">u2") if depth == 16 else arr.astype(np.uint8))
    def raw(sub):
        rows = sub.reshape(sub.shape[0], -1).view(np.uint8).reshape(sub.shape[0], -1)
        return b"".join(b"\0" + r.tobytes() for r in rows)
    if interlace:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4),
                  (1, 0, 2, 2), (0, 1, 1, 2)]
        data = b"".join(raw(a[y0::dy, x0::dx]) for x0, y0, dx, dy in passes
                        if a[y0::dy, x0::dx].size)
    else:
        data = raw(a)
    s = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ct, 0, 0,
                                                         1 if interlace else 0))
    if trns is not None:
        s += chunk(b"tRNS", trns)
    return s + chunk(b"IDAT", zlib.compress(data, 6)) + chunk(b"IEND", b"")


def save(im, **kw):
    b = io.BytesIO()
    im.save(b, **kw)
    return b.getvalue()


def variants(im):
    rgb = np.asarray(im.convert("RGB"))
    h, w = rgb.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w]
    alpha = ((xx * 255) // max(w - 1, 1)).astype(np.uint8)  # 0 (transparent) to opaque
    rgba = np.dstack([rgb, alpha])
    # 16-bit: the photo in the high byte, a pattern in the low byte
    lo = ((xx * 7 + yy * 13) % 256).astype(np.uint16)
    rgb16 = (rgb.astype(np.uint16) << 8) | lo[..., None]
    gray = np.asarray(im.convert("L"))
    # 16-bit gray: mostly small values (Pillow keeps those) and some over 255 (clipped)
    gray16 = gray.astype(np.uint16) * ((xx % 3) * 128 + 1).astype(np.uint16)
    out = {
        "rgb8.png": save(Image.fromarray(rgb), format="PNG"),
        "rgba8.png": save(Image.fromarray(rgba, "RGBA"), format="PNG"),
        "rgb16.png": png_bytes(rgb16, 2, 16),
        "rgba16.png": png_bytes(np.dstack([rgb16, (alpha.astype(np.uint16) * 257)]), 6, 16),
        "gray8.png": save(Image.fromarray(gray), format="PNG"),
        "gray16.png": save(Image.fromarray(gray16.astype(np.uint16)), format="PNG"),
        "gray1.png": save(Image.fromarray(gray).convert("1"), format="PNG"),
        "graya8.png": save(Image.fromarray(np.dstack([gray, alpha]), "LA"), format="PNG"),
        "graya16.png": png_bytes(np.dstack([(gray.astype(np.uint16) << 8) | lo,
                                            alpha.astype(np.uint16) * 257]), 4, 16),
        "pal8.png": save(im.convert("RGB").quantize(256), format="PNG"),
        "pal8t.png": save(im.convert("RGB").quantize(200), format="PNG", transparency=3),
        "pal4.png": save(im.convert("RGB").quantize(16), format="PNG", bits=4),
        "interlaced.png": png_bytes(rgb, 2, 8, interlace=True),
        "rgbt.png": png_bytes(rgb, 2, 8, trns=struct.pack(">HHH", *map(int, rgb[0, 0]))),
        "lossy.webp": save(Image.fromarray(rgb), format="WEBP", quality=80),
        "lossless.webp": save(Image.fromarray(rgb), format="WEBP", lossless=True),
        "lossya.webp": save(Image.fromarray(rgba, "RGBA"), format="WEBP", quality=80),
        "losslessa.webp": save(Image.fromarray(rgba, "RGBA"), format="WEBP", lossless=True,
                               exact=True),
    }
    return out


def refused_by_pillow(data):
    try:
        Image.open(io.BytesIO(data)).convert("RGB")
    except Exception:
        return True
    return False


def main():
    src, dst = sys.argv[1], sys.argv[2]
    corrupt = "--corrupt" in sys.argv[3:]
    n = 0
    for c in sorted(os.listdir(src)):
        cdir = os.path.join(src, c)
        if not os.path.isdir(cdir):
            continue
        os.makedirs(os.path.join(dst, c), exist_ok=True)
        for f in sorted(os.listdir(cdir)):
            stem = os.path.splitext(f)[0]
            im = Image.open(os.path.join(cdir, f))
            for name, data in variants(im).items():
                with open(os.path.join(dst, c, f"{stem}-{name}"), "wb") as o:
                    o.write(data)
                n += 1
            if corrupt:
                v = variants(im)
                os.makedirs(os.path.join(dst, "bad"), exist_ok=True)
                png, webp = v["rgb8.png"], v["lossy.webp"]
                i = png.index(b"IDAT") + 4 + 20
                bad = {
                    "cut.png": png[: len(png) * 2 // 3],
                    "cut.webp": webp[: len(webp) * 2 // 3],
                    "crc.png": png[:i] + bytes([png[i] ^ 0xFF]) + png[i + 1:],
                    "bits.webp": webp[:40] + bytes(b ^ 0x5A for b in webp[40:80]) + webp[80:],
                }
                for name, data in bad.items():
                    path = os.path.join(dst, "bad", f"{c}-{stem}-{name}")
                    with open(path, "wb") as o:
                        o.write(data)
                    if name != "bits.webp" and not refused_by_pillow(data):
                        sys.exit(f"gen_codec: Pillow reads {path}: not a corrupt file")
                corrupt = False  # one set is enough
    print(f"gen_codec: {n} files in {dst}")


if __name__ == "__main__":
    main()
