"""What an image is (its media type and size), read from its header with Pillow: nothing
is decoded, so a large screenshot costs its header's bytes."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class ImageFacts:
    mime: str
    width: int
    height: int


def image_facts(raw: bytes) -> ImageFacts | None:
    """The image's type and size, or None for bytes Pillow cannot read as an image."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            # a huge image is only described here, never decoded: no bomb to warn of
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(raw)) as image:
                mime = Image.MIME.get(image.format or "", f"image/{(image.format or '').lower()}")
                return ImageFacts(mime, image.width, image.height)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return None
