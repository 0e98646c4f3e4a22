"""tests/boxes_ref.py — the numpy reference of the box transform (engine/augment.c,
bfs_augment_boxes), as docs/multimodal.md states it.

Given the geometry the engine chose for one sample (the crop box inside the image, the
size the crop is resized to, the window of it that is the output, the flip), boxes in
source pixels become output pixels: moved into the crop, scaled by the resize, shifted
by the window, clipped to it, mirrored; a box left with less than min_area output
pixels² (or none) is dropped. float64 throughout, f32 at the end.
"""
import numpy as np


def transform(boxes, geom, min_area):
    """boxes: (N, 4) float32 x0, y0, x1, y1; geom: dict of flip, box (4 floats: the Pillow
    box inside the crop), out (ow, oh), win (x, y, w, h), origin (ox, oy).
    Returns (kept rows float32 (K, 4), source row indices (K,))."""
    b = np.asarray(boxes, dtype=np.float32).astype(np.float64).reshape(-1, 4)
    bx0, by0, bx1, by1 = geom["box"]
    ow, oh = geom["out"]
    wx, wy, ww, wh = geom["win"]
    ox, oy = geom["origin"]
    sx, sy = ow / (bx1 - bx0), oh / (by1 - by0)
    with np.errstate(invalid="ignore"):
        x0 = ((b[:, 0] - ox) - bx0) * sx - wx
        y0 = ((b[:, 1] - oy) - by0) * sy - wy
        x1 = ((b[:, 2] - ox) - bx0) * sx - wx
        y1 = ((b[:, 3] - oy) - by0) * sy - wy
        x0, x1 = np.clip(np.nan_to_num(x0, nan=0.0), 0, ww), np.clip(np.nan_to_num(x1, nan=0.0), 0, ww)
        y0, y1 = np.clip(np.nan_to_num(y0, nan=0.0), 0, wh), np.clip(np.nan_to_num(y1, nan=0.0), 0, wh)
        ok = (x1 > x0) & (y1 > y0) & ((x1 - x0) * (y1 - y0) >= min_area) & np.isfinite(b).all(axis=1)
    if geom["flip"]:
        x0, x1 = ww - x1, ww - x0
    out = np.stack([x0, y0, x1, y1], axis=1)[ok].astype(np.float32)
    return out, np.nonzero(ok)[0]
