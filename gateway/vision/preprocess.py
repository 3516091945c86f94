"""Image preprocessing exactly as llama.cpp's mtmd does it (tools/mtmd/mtmd-image.cpp), for the two projector
types the runtime encodes (csrc/vision/).

mtmd's resampler is a port of Pillow's (separable filters, 22-bit fixed-point weights, the same support and
rounding, uint8 between the passes) that always runs the horizontal pass first; Pillow picks the order itself
(vertical first for some shapes, which changes pixels by up to 6 levels on tall images), so each pass is a
separate one-axis Pillow resize. Measured bit-identical to a transcription of mtmd's code for every test image. Sizes are computed with mtmd's arithmetic (float32 scale for gemma3's letterbox, integer truncation and
round-up-to-even for idefics3), then pixels are normalised in float32 as `(v / 255 − mean) / std`.

- gemma3: letterbox into image_size² (bilinear, black padding, centred) → one encoder input.
- idefics3: longest side to longest_edge (the other side truncated, then rounded up to even), then up to whole
  image_size tiles; tiles are cut row-major, and an overview is the tiled image resized to one tile (Lanczos).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class VisionConfig:
    """What preprocessing needs from a projector file (lanes._runtime.VisionEncoder exposes the same fields)."""
    projector_type: str            # "gemma3" | "idefics3"
    image_size: int
    patch_size: int
    merge: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    longest_edge: int = 0

    @property
    def tokens_per_image(self) -> int:
        side = self.image_size // self.patch_size // self.merge
        return side * side

    @classmethod
    def from_encoder(cls, enc) -> "VisionConfig":
        return cls(enc.projector_type, enc.image_size, enc.patch_size, enc.merge, tuple(enc.image_mean),
                   tuple(enc.image_std), enc.longest_edge)


@dataclass
class PreprocessedImage:
    """Encoder inputs in prompt order (idefics3: the tiles row-major, then the overview) and the tile grid."""
    inputs: list[np.ndarray]       # each float32 (3, image_size, image_size), normalised
    grid_cols: int = 0             # idefics3 only
    grid_rows: int = 0


def normalise(img: Image.Image, cfg: VisionConfig) -> np.ndarray:
    """uint8 RGB → float32 (3, H, W): (v / 255 − mean) / std, every step in float32 as mtmd computes it."""
    arr = np.asarray(img, dtype=np.uint8).astype(np.float32) / np.float32(255.0)
    arr = (arr - np.asarray(cfg.mean, np.float32)) / np.asarray(cfg.std, np.float32)
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def _resize(img: Image.Image, size: tuple[int, int], resample: int) -> Image.Image:
    """mtmd's resize_pillow: horizontal pass, then vertical, each skipped when that side keeps its size."""
    if img.size == size:
        return img.copy()
    if size[0] != img.width:
        img = img.resize((size[0], img.height), resample)
    if size[1] != img.height:
        img = img.resize(size, resample)
    return img


def letterbox_size(width: int, height: int, target: int) -> tuple[int, int]:
    """mtmd's PAD_CEIL sizing: float32 scale, ceil, clamped to the target."""
    t, w, h = np.float32(target), np.float32(width), np.float32(height)
    scale = min(t / w, t / h)
    return min(math.ceil(float(w * scale)), target), min(math.ceil(float(h * scale)), target)


def preprocess_gemma3(img: Image.Image, cfg: VisionConfig) -> PreprocessedImage:
    s = cfg.image_size
    if img.size != (s, s):
        nw, nh = letterbox_size(img.width, img.height, s)
        canvas = Image.new("RGB", (s, s), (0, 0, 0))
        canvas.paste(_resize(img, (nw, nh), Image.Resampling.BILINEAR), ((s - nw) // 2, (s - nh) // 2))
        img = canvas
    return PreprocessedImage([normalise(img, cfg)])


def idefics3_sizes(width: int, height: int, cfg: VisionConfig) -> tuple[tuple[int, int], int, int]:
    """(resized size, grid columns, grid rows) as mtmd_image_preprocessor_idefics3 computes them."""
    edge, tile = cfg.longest_edge, cfg.image_size
    aspect = width / height  # double, as mtmd
    if width >= height:
        rw, rh = edge, int(edge / aspect)
        rh += rh % 2
    else:
        rw, rh = int(edge * aspect), edge
        rw += rw % 2
    return (rw, rh), (rw + tile - 1) // tile, (rh + tile - 1) // tile


def preprocess_idefics3(img: Image.Image, cfg: VisionConfig) -> PreprocessedImage:
    tile = cfg.image_size
    resized_size, cols, rows = idefics3_sizes(img.width, img.height, cfg)
    lanczos = Image.Resampling.LANCZOS
    refined = _resize(_resize(img, resized_size, lanczos), (cols * tile, rows * tile), lanczos)
    overview = _resize(refined, (tile, tile), lanczos)
    tiles = [refined.crop((x * tile, y * tile, (x + 1) * tile, (y + 1) * tile)) for y in range(rows)
             for x in range(cols)]
    return PreprocessedImage([normalise(t, cfg) for t in tiles] + [normalise(overview, cfg)], cols, rows)


def preprocess(img: Image.Image, cfg: VisionConfig) -> PreprocessedImage:
    """img must already be RGB (gateway.vision.decode)."""
    if img.mode != "RGB":
        raise ValueError(f"expected an RGB image, got mode {img.mode}")
    if cfg.projector_type == "gemma3":
        return preprocess_gemma3(img, cfg)
    if cfg.projector_type == "idefics3":
        return preprocess_idefics3(img, cfg)
    raise ValueError(f"unsupported projector type {cfg.projector_type!r}")
