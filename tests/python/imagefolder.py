"""ImageFolders of photo-like JPEGs for the Python tests, written with Pillow (an independent
encoder): smooth gradients plus noise, so resampling and decoder differences stay small."""

import numpy as np
from PIL import Image


def write_image_folder(root, classes, per_class, sides, noise, quality, seed, digits=1):
    """`classes` folders `class<c>` of `per_class` JPEGs `img<i>.jpg` (`i` zero-padded to
    `digits`), each side drawn from `sides` = (low, high), the noise in [-noise, noise)."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        d = root / f"class{c}"
        d.mkdir()
        for i in range(per_class):
            w, h = int(rng.integers(*sides)), int(rng.integers(*sides))
            y, x = np.mgrid[0:h, 0:w]
            px = np.stack([x * 255 // w, y * 255 // h, (x + y) * 127 // (w + h) + 60 * c], -1)
            px = np.clip(px + rng.integers(-noise, noise, px.shape), 0, 255).astype(np.uint8)
            Image.fromarray(px).save(d / f"img{i:0{digits}}.jpg", quality=quality)
    return root


def copy_image_folder(src, dst, classes):
    """A copy of `src`'s class folders in `dst` (to add a broken file to)."""
    for c in range(classes):
        (dst / f"class{c}").mkdir()
        for f in (src / f"class{c}").iterdir():
            (dst / f"class{c}" / f.name).write_bytes(f.read_bytes())
    return dst
