"""Writes the WebP fixtures of tests/codec_webp.rs and, beside each, the RGB pixels Pillow's
Image.open(f).convert('RGB') gives (raw, row-major, 3 bytes per pixel; Pillow decodes with
libwebp). Run from this folder with Pillow + numpy (tests/requirements.txt): python make.py"""
import numpy as np
from PIL import Image

W, H = 40, 30
y, x = np.mgrid[0:H, 0:W]


def save(name, im, **kw):
    im.save(f"{name}.webp", **kw)
    back = Image.open(f"{name}.webp")
    with open(f"{name}.rgb", "wb") as f:
        f.write(np.asarray(back.convert("RGB"), dtype=np.uint8).tobytes())
    print(name, back.mode, back.size, kw)


rgba = np.stack([x * 6 % 256, y * 8 % 256, (x * y) % 256, (x + y) * 4 % 256], -1).astype(np.uint8)
save("lossless_rgb", Image.fromarray(rgba[..., :3], "RGB"), lossless=True)
save("lossless_rgba", Image.fromarray(rgba, "RGBA"), lossless=True)
# Smooth content so lossy decoders' rounding, not the codec's blocking, is what differs.
smooth = np.stack([x * 255 // W, y * 255 // H, (x + y) * 255 // (W + H)], -1).astype(np.uint8)
save("lossy_rgb", Image.fromarray(smooth, "RGB"), quality=90)
save("lossy_rgba", Image.fromarray(np.dstack([smooth, rgba[..., 3]]), "RGBA"), quality=90)
