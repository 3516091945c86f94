"""Where an image's embeddings go in the prompt, with the marker text around them (llama.cpp's mtmd layout).

A layout is a list of segments: a str is marker text (tokenized on its own with special tokens parsed, as mtmd
tokenizes it), an int is the index of an encoder input whose tokens_per_image embeddings go there.
- gemma3: <start_of_image> [image] <end_of_image>
- idefics3: per tile, row-major, "<fake_token_around_image><row_R_col_C>" [tile], "\\n" after every row but the
  last; then "\\n\\n<fake_token_around_image><global-img>" [overview] "<fake_token_around_image>".
"""
from __future__ import annotations

from gateway.vision.preprocess import PreprocessedImage

Segment = str | int

# Vocabulary entries a text model needs for each projector (llama.cpp refuses image requests without them).
REQUIRED_TOKENS = {
    "gemma3": ("<start_of_image>", "<end_of_image>"),
    "idefics3": ("<fake_token_around_image>", "<global-img>"),  # plus <row_R_col_C> for each tile used
}


def image_layout(projector_type: str, pre: PreprocessedImage) -> list[Segment]:
    if projector_type == "gemma3":
        return ["<start_of_image>", 0, "<end_of_image>"]
    if projector_type != "idefics3":
        raise ValueError(f"unsupported projector type {projector_type!r}")
    out: list[Segment] = []
    for r in range(pre.grid_rows):
        for c in range(pre.grid_cols):
            out += [f"<fake_token_around_image><row_{r + 1}_col_{c + 1}>", r * pre.grid_cols + c]
        if r != pre.grid_rows - 1:
            out.append("\n")
    out += ["\n\n<fake_token_around_image><global-img>", pre.grid_rows * pre.grid_cols, "<fake_token_around_image>"]
    return out


def marker_tokens(projector_type: str, pre: PreprocessedImage) -> list[str]:
    """Every marker token the layout uses (for the clear error when the text model lacks one)."""
    if projector_type == "gemma3":
        return list(REQUIRED_TOKENS["gemma3"])
    rows_cols = [f"<row_{r + 1}_col_{c + 1}>" for r in range(pre.grid_rows) for c in range(pre.grid_cols)]
    return list(REQUIRED_TOKENS["idefics3"]) + rows_cols
