"""The sliding window's two per-batch ops on their own, in one process: every window of a
1x1x255x223x276 float32 volume (roi 96^3, sw_batch_size 4, MONAI's BTCV validation layout)
gathered (`window_gather_`), stitched (`window_stitch_`, constant weights, identity
predictions), and both alternating as the inferer runs them, into buffers allocated once (so no
page faults are timed). Prints the median ms per full pass over the windows for each overlap.
Compare builds with VOXAUG_LIBRARY=/path/to/libvoxaug_torch.so.

    python3 benchmarks/window_parts.py [--threads 2] [--repeats 7] [--overlaps 0.25,0.5,0.8]
"""

import torch

from voxaug.inferers import _Layout

from bench_timing import median_ms, parse, parser, print_header

SHAPE = (1, 1, 255, 223, 276)
ROI = [96, 96, 96]
SW = 4


def main() -> None:
    ap = parser(__doc__, 7)
    ap.add_argument("--overlaps", default="0.25,0.5,0.8")
    a = parse(ap)
    x = torch.rand(SHAPE, generator=torch.Generator().manual_seed(0))
    size = list(SHAPE[2:])
    print_header()
    print(f"timing   median of {a.repeats} full passes, {SHAPE} float32, roi {ROI}, sw_batch_size {SW}\n")
    print(f"{'overlap':>7} {'windows':>7} {'gather ms':>10} {'stitch ms':>10} {'both ms':>10}")
    for ov in (float(v) for v in a.overlaps.split(",")):
        overlap = [ov] * 3
        total = _Layout(size, ROI, overlap).per_image
        padded = _Layout(size, ROI, overlap).padded
        buf = torch.ops.voxaug.window_accumulator([SW, 1, *ROI], torch.float32, x.device, False)
        acc = torch.ops.voxaug.window_accumulator([1, 1, *padded], torch.float32, x.device, True)
        batches = [(first, min(SW, total - first)) for first in range(0, total, SW)]

        def gather(_i):
            for first, n in batches:
                torch.ops.voxaug.window_gather_(x, buf[:n], ROI, overlap, first, 0, 0.0)

        def stitch(_i):
            for first, n in batches:
                torch.ops.voxaug.window_stitch_(acc, buf[:n], None, size, ROI, overlap, first)

        def both(_i):
            for first, n in batches:
                torch.ops.voxaug.window_gather_(x, buf[:n], ROI, overlap, first, 0, 0.0)
                torch.ops.voxaug.window_stitch_(acc, buf[:n], None, size, ROI, overlap, first)

        g, s, b = (median_ms(f, a.repeats) for f in (gather, stitch, both))
        print(f"{ov:7.2f} {total:7d} {g:10.1f} {s:10.1f} {b:10.1f}")


if __name__ == "__main__":
    main()
