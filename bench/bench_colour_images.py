"""A colour image input from a camera frame, each resize, against torch in the same run.

Ours: :func:`plugin_host.frames.nv12_to_rgb` of one 1928 x 1208 NV12 frame (the synthetic
camera's size, random samples) to the image sizes and fits detectors and classifiers take,
with each ``resize``: only the source pixels the weights reach are converted, a strip at a
time. The peer: the pipeline a decoder and torch make, the whole frame converted to RGB (by
the same BT.601 conversion, at the frame's own size), then ``torch.nn.functional.interpolate``
(``nearest-exact``, or ``bilinear`` with ``antialias`` as the mode says; float32, torch's own
threads) and rounded to uint8. Both give the same samples to float32 rounding (the tests check
ours against torch in float64).

Printed per case: medians of ``--runs`` calls (ms) and ours / peer.

    .venv/bin/python bench/bench_colour_images.py [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CASES = [((640, 640), "letterbox"), ((224, 224), "crop"), ((384, 640), "stretch")]
RESIZES = ("nearest", "bilinear", "bilinear-antialias")
H_IN, W_IN = 1208, 1928


def median_ms(call, runs: int) -> float:
    call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    import torch

    from plugin_host.frames.rgb import fit_boxes, nv12_to_rgb

    rng = np.random.default_rng(0)
    y = rng.integers(0, 256, (H_IN, W_IN), dtype=np.uint8)
    uv = rng.integers(0, 256, (H_IN // 2, W_IN // 2, 2), dtype=np.uint8)

    def peer(size, fit, resize):
        (sy, sx, sh, sw), (oy, ox, oh, ow) = fit_boxes((H_IN, W_IN), size, fit)
        full = torch.from_numpy(nv12_to_rgb(y, uv, width=W_IN, height=H_IN))
        box = full[None, :, sy:sy + sh, sx:sx + sw].float()
        if resize == "nearest":
            out = torch.nn.functional.interpolate(box, size=(oh, ow), mode="nearest-exact")
        else:
            out = torch.nn.functional.interpolate(box, size=(oh, ow), mode="bilinear",
                                                  align_corners=False,
                                                  antialias=resize == "bilinear-antialias")
        image = torch.full((3,) + size, 114, dtype=torch.uint8)
        image[:, oy:oy + oh, ox:ox + ow] = out[0].round()
        return image

    print(f"{W_IN} x {H_IN} NV12 frame -> colour image, medians of {args.runs} (ms)")
    print(f"{'image':>10} {'fit':>10} {'resize':>19} {'ours':>8} {'torch':>8} {'ratio':>6}")
    for size, fit in CASES:
        for resize in RESIZES:
            ours = median_ms(lambda: nv12_to_rgb(y, uv, width=size[1], height=size[0], fit=fit,
                                                 resize=resize), args.runs)
            theirs = median_ms(lambda: peer(size, fit, resize), args.runs)
            got = nv12_to_rgb(y, uv, width=size[1], height=size[0], fit=fit, resize=resize)
            apart = int(np.abs(got.astype(int) - peer(size, fit, resize).numpy()).max())
            assert apart <= 1, f"{size} {fit} {resize}: ours and torch's {apart} apart"
            print(f"{size[1]:>4} x {size[0]:<3} {fit:>10} {resize:>19} {ours:8.2f} "
                  f"{theirs:8.2f} {ours / theirs:6.2f}")


if __name__ == "__main__":
    main()
