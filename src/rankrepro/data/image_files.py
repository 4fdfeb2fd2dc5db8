"""What reading an image file can raise: PIL's errors on a truncated, corrupt or unidentifiable
file (:data:`READ_ERRORS`), and :class:`ImageReadError`, which the readers
(:class:`rankrepro.data.images.ImageDataset`, :mod:`rankrepro.data.cache`) raise in their place
with the file (and manifest row) named."""

from __future__ import annotations

from PIL import Image

from rankrepro.messages import ShortMessage

__all__ = ["READ_ERRORS", "ImageReadError"]

# what PIL raises on a truncated, corrupt or unidentifiable file (UnidentifiedImageError is an OSError)
READ_ERRORS = (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError)


class ImageReadError(ShortMessage, OSError):
    """An image of a manifest could not be read; the message names the file and the manifest row."""
