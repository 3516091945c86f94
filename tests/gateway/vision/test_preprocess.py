"""Unit tests of gateway.vision preprocessing and prompt layout (no model): mtmd's sizes and marker text."""
import numpy as np
import pytest
from PIL import Image

from gateway.vision.layout import image_layout, marker_tokens
from gateway.vision.preprocess import (VisionConfig, idefics3_sizes, letterbox_size, normalise, preprocess)

IDEFICS3 = VisionConfig("idefics3", 128, 16, 2, (0.5, 0.4, 0.3), (0.2, 0.25, 0.3), longest_edge=384)
GEMMA3 = VisionConfig("gemma3", 96, 8, 2, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


@pytest.mark.parametrize("size, resized, grid", [
    ((300, 200), (384, 256), (3, 2)),
    ((100, 400), (96, 384), (1, 3)),
    ((10, 6), (384, 230), (3, 2)),      # int(384 / (10/6)) = 230, already even
    ((384, 384), (384, 384), (3, 3)),
    ((1000, 999), (384, 384), (3, 3)),  # int(384 / 1.001) = 383, rounded up to even
])
def test_idefics3_sizes_follow_mtmd(size, resized, grid):
    got_resized, cols, rows = idefics3_sizes(*size, IDEFICS3)
    assert got_resized == resized and (cols, rows) == grid


@pytest.mark.parametrize("size, expect", [((200, 120), (96, 58)), ((40, 150), (26, 96)), ((96, 96), (96, 96)),
                                          ((5, 7), (69, 96))])
def test_letterbox_size_is_float32_ceil(size, expect):
    assert letterbox_size(*size, 96) == expect


def test_normalise_is_float32_per_channel_planar():
    img = Image.fromarray(np.array([[[255, 0, 51]]], np.uint8))
    out = normalise(img, IDEFICS3)
    assert out.shape == (3, 1, 1) and out.dtype == np.float32
    want = [(np.float32(v) / np.float32(255) - np.float32(m)) / np.float32(s)
            for v, m, s in zip((255, 0, 51), IDEFICS3.mean, IDEFICS3.std)]
    assert out[:, 0, 0].tolist() == [float(w) for w in want]


def test_gemma3_letterbox_pads_black_and_centres():
    img = Image.fromarray(np.full((120, 200, 3), 255, np.uint8))
    (x,) = preprocess(img, GEMMA3).inputs
    black, white = -1.0, 1.0
    assert x.shape == (3, 96, 96)
    assert np.all(x[:, :19, :] == black) and np.all(x[:, 77:, :] == black)  # (96 - 58) // 2 = 19 rows on top
    assert np.all(x[:, 19:77, :] == white)


def test_idefics3_tiles_then_overview_and_layout():
    img = Image.fromarray(np.zeros((200, 300, 3), np.uint8))
    pre = preprocess(img, IDEFICS3)
    assert (pre.grid_cols, pre.grid_rows) == (3, 2) and len(pre.inputs) == 7
    assert all(x.shape == (3, 128, 128) for x in pre.inputs)
    assert image_layout("idefics3", pre) == [
        "<fake_token_around_image><row_1_col_1>", 0, "<fake_token_around_image><row_1_col_2>", 1,
        "<fake_token_around_image><row_1_col_3>", 2, "\n",
        "<fake_token_around_image><row_2_col_1>", 3, "<fake_token_around_image><row_2_col_2>", 4,
        "<fake_token_around_image><row_2_col_3>", 5,
        "\n\n<fake_token_around_image><global-img>", 6, "<fake_token_around_image>"]
    assert "<row_2_col_3>" in marker_tokens("idefics3", pre)


def test_non_rgb_is_refused():
    with pytest.raises(ValueError, match="RGB"):
        preprocess(Image.new("RGBA", (4, 4)), GEMMA3)
