"""Writes the PNG fixtures of tests/codec_png.rs and, beside each, the RGB pixels Pillow's
Image.open(f).convert('RGB') gives (raw, row-major, 3 bytes per pixel). Run from this folder
with Pillow + numpy (tests/requirements.txt): python make.py"""
import numpy as np
from PIL import Image

W, H = 32, 24
y, x = np.mgrid[0:H, 0:W]


def save(name, im, **kw):
    im.save(f"{name}.png", **kw)
    back = Image.open(f"{name}.png")
    with open(f"{name}.rgb", "wb") as f:
        f.write(np.asarray(back.convert("RGB"), dtype=np.uint8).tobytes())
    print(name, back.mode, back.size)


rgba = np.stack([x * 8 % 256, y * 10 % 256, (x * y) % 256, (x + y) * 5 % 256], -1).astype(np.uint8)
save("rgba8", Image.fromarray(rgba, "RGBA"))
save("la8", Image.fromarray(rgba[..., [0, 3]], "LA"))
pal = Image.fromarray(rgba[..., :3], "RGB").quantize(colors=13)
save("palette_trns", pal, transparency=3)
gray16 = ((x * 97 + y * 401) % 1200).astype(np.uint16)
save("gray16", Image.fromarray(gray16))
