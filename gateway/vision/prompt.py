"""A rendered chat prompt with image markers → token ids plus the images' embeddings for the lane.

The chat template renders each image as IMAGE_MARKER (gateway.vision.parts); each marker is replaced by the
projector's layout (gateway.vision.layout): marker text tokenized with special tokens parsed, and one run of
placeholder ids per encoder input whose embeddings the lane injects (lanes.api.PromptImage). Embeddings are
computed here with the model's VisionModel and kept in an LRU keyed by the projector and the encoder input's
pixels, so a conversation that sends the same picture every turn encodes it once; the same key (its first 8
bytes) is the content hash the lane uses to tell images apart in its prefix reuse and prompt cache.
Encoding is CPU work that releases the GIL: call build_image_prompt from a worker thread.
"""
from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from typing import Callable

import numpy as np
from PIL import Image

from gateway.vision.layout import image_layout, marker_tokens
from gateway.vision.parts import IMAGE_MARKER
from gateway.vision.preprocess import VisionConfig, preprocess

PLACEHOLDER_ID = 0  # the id under an image position: never looked up (its embedding replaces it)


class VisionModel:
    """One model's projector: its encoder, preprocessing configuration and embedding cache."""

    def __init__(self, mmproj_path: str, text_n_embd: int, n_threads: int = 1, cache_bytes: int = 64 << 20) -> None:
        from lanes._runtime import VisionEncoder  # native; imported here so unit tests need no build

        self.path = mmproj_path
        self.encoder = VisionEncoder(mmproj_path, n_threads=n_threads, text_n_embd=text_n_embd)
        self.config = VisionConfig.from_encoder(self.encoder)
        st = os.stat(mmproj_path)
        self._projector_key = f"{os.path.realpath(mmproj_path)}:{st.st_size}:{st.st_mtime_ns}".encode()
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._cache_bytes, self._max_cache_bytes = 0, cache_bytes
        self._lock = threading.Lock()  # worker threads share the cache (and one encoder at a time)
        self.hits = self.misses = 0

    @property
    def projector_type(self) -> str:
        return self.config.projector_type

    @property
    def non_causal(self) -> bool:
        """gemma3's image tokens attend to each other both ways (so one image must fit in one step)."""
        return self.projector_type == "gemma3"

    def embed(self, pixels: np.ndarray) -> tuple[np.ndarray, int]:
        """(embeddings [tokens_per_image, n_embd], 64-bit content hash) of one normalised encoder input."""
        key = hashlib.sha256(self._projector_key + np.ascontiguousarray(pixels, dtype=np.float32).tobytes()).digest()
        content_hash = int.from_bytes(key[:8], "little")
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return hit, content_hash
            self.misses += 1
            out = self.encoder.encode(pixels)
            out.setflags(write=False)
            self._cache[key] = out
            self._cache_bytes += out.nbytes
            while self._cache_bytes > self._max_cache_bytes and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cache_bytes -= old.nbytes
        return out, content_hash


def build_image_prompt(rendered: str, images: list[Image.Image], vision: VisionModel,
                       encode_first: Callable[[str], list[int]], encode_more: Callable[[str], list[int]],
                       has_token: Callable[[str], bool]) -> tuple[list[int], list[tuple[int, np.ndarray, bool, int]]]:
    """(prompt ids, [(pos, embeddings, non_causal, content hash)] per encoder input). encode_first tokenizes the
    text before the first image (BOS as for a text prompt), encode_more every later piece (special tokens parsed,
    no BOS). ValueError when the template did not keep one marker per image or the text model lacks a marker
    token the projector's layout needs."""
    pieces = rendered.split(IMAGE_MARKER)
    if len(pieces) - 1 != len(images):
        raise ValueError(f"the chat template kept {len(pieces) - 1} of {len(images)} image markers")
    ids = list(encode_first(pieces[0]))
    spans = []
    non_causal = vision.non_causal
    for img, after in zip(images, pieces[1:]):
        pre = preprocess(img, vision.config)
        missing = [t for t in marker_tokens(vision.projector_type, pre) if not has_token(t)]
        if missing:
            raise ValueError(f"the text model's vocabulary lacks the image marker token {missing[0]!r}")
        for seg in image_layout(vision.projector_type, pre):
            if isinstance(seg, str):
                ids += encode_more(seg)
            else:
                emb, content_hash = vision.embed(pre.inputs[seg])
                spans.append((len(ids), emb, non_causal, content_hash))
                ids += [PLACEHOLDER_ID] * emb.shape[0]
        if after:
            ids += encode_more(after)
    return ids, spans
