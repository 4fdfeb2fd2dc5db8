"""What reading an image file can raise: PIL's errors on a truncated, corrupt or unidentifiable
file (:data:`READ_ERRORS`), and :class:`ImageReadError`, which every reader raises in their place
with the file (and manifest row) named: :func:`naming_image` does the replacing, :func:`read_rgb`
reads a whole image under it (:class:`rankrepro.data.images.ImageDataset`,
:class:`rankrepro.engine.tasks.detection.VOCImages`; :mod:`rankrepro.data.cache` uses
:func:`naming_image` for its own reading)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from PIL import Image

from rankrepro.messages import ShortMessage

__all__ = ["READ_ERRORS", "ImageReadError", "naming_image", "read_rgb"]

# what PIL raises on a truncated, corrupt or unidentifiable file (UnidentifiedImageError is an OSError)
READ_ERRORS = (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError)


class ImageReadError(ShortMessage, OSError):
    """An image of a manifest could not be read (or cropped); the message names the file and the manifest row."""


@contextmanager
def naming_image(path: str | Path, where: str = "", doing: str = "read"):
    """Inside the block, an error of :data:`READ_ERRORS` becomes an :class:`ImageReadError` (chained to it):
    ``cannot <doing> image <path> (<where>): <error type>: <error>``; an :class:`ImageReadError` passes as is."""
    try:
        yield
    except ImageReadError:
        raise
    except READ_ERRORS as err:
        place = f" ({where})" if where else ""
        raise ImageReadError(f"cannot {doing} image {path}{place}: {type(err).__name__}: {err}") from err


def read_rgb(path: str | Path, where: str = "") -> Image.Image:
    """The image at ``path``, decoded in full (a truncated file fails here, not later) and in RGB; an
    unreadable one raises :class:`ImageReadError` naming ``path`` and ``where`` (its manifest row)."""
    with naming_image(path, where), Image.open(path) as image:
        return image.convert("RGB")
