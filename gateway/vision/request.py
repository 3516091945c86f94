"""A chat request's images on the way to the lane: the routes' errors for them, and the prompt built around them.

Both protocols' parsers collect RequestImages (gateway.vision.parts) and render the chat template with one
IMAGE_MARKER per image; gateway.features.chat_prompt then calls `image_prompt` here (in a worker thread: decoding
and encoding are CPU work) for the prompt ids and the lane's PromptImages. Errors are APIErrors, which each
protocol's adapter answers in its own shape: a bad payload is a 400 naming its part, an image beyond the byte or
pixel limit a 413, an image for a model without a projector a 400.
"""
from __future__ import annotations

from gateway.http.errors import APIError, invalid
from gateway.vision.decode import ImageDecodeError, ImageTooLarge, decode_image
from gateway.vision.parts import RequestImage
from lanes.api import PromptImage


def image_error(exc: ImageDecodeError | ImageTooLarge, param: str | None = None) -> APIError:
    if isinstance(exc, ImageTooLarge):
        return APIError(413, str(exc), param=param, code="image_too_large")
    return invalid(str(exc), param=param, code="invalid_image")


def check_images_served(served, images, param: str) -> None:
    """An image for a model without a projector (--mmproj) → 400."""
    if images and served.vision is None:
        raise invalid(f"model {served.name!r} does not take images (it has no vision projector)", param=param,
                      code="images_not_supported")


def has_token(text, token: str) -> bool:
    """Whether the text model's vocabulary has `token` as one token (special tokens parsed, as mtmd tokenizes)."""
    return len(text.tokenizer.encode(token, False, True)) == 1


def image_prompt(text, vision, rendered: str, images: list[RequestImage], param: str
                 ) -> tuple[list[int], tuple[PromptImage, ...]]:
    """(prompt ids with placeholder ids under the images, the lane's PromptImages) of a rendered chat prompt whose
    IMAGE_MARKERs stand for `images` in order. text: gateway.text.model_text.ModelText; vision: its VisionModel."""
    from gateway.vision.prompt import build_image_prompt

    pictures = []
    for im in images:
        try:
            pictures.append(decode_image(im.data, im.where))
        except (ImageDecodeError, ImageTooLarge) as exc:
            raise image_error(exc, im.where) from None
    tok = text.tokenizer
    try:
        ids, spans = build_image_prompt(rendered, pictures, vision, text.encode_rendered,
                                        lambda s: list(tok.encode(s, False, True)),
                                        lambda t: has_token(text, t))
    except ValueError as exc:
        raise invalid(str(exc), param=param, code="invalid_image") from None
    return ids, tuple(PromptImage(*span) for span in spans)
