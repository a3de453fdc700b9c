"""The stats family's host passes on their own, in one process: ops.moments (dense and nonzero)
and the NormalizeIntensity apply alone (given subtrahend / divisor, so no statistics), on
2x1x128^3 and 1x1x224x224x160 float32 (uniform [0, 100), values below 20 set to 0 for the
nonzero case). Prints the minimum and median ms of --repeats calls. Compare builds with
VOXAUG_LIBRARY=/path/to/libvoxaug_torch.so.

    python3 benchmarks/stats_parts.py [--threads 2] [--repeats 40]
"""
import statistics
import time

import torch

from voxaug import ops

from bench_timing import parse, parser, print_header


def timed(fn, repeats):
    fn()
    fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return min(out), statistics.median(out)


def main() -> None:
    ap = parser(__doc__, 40)
    a = parse(ap)
    print_header()
    print(f"{'shape':>20} {'moments':>14} {'moments nz':>14} {'apply':>14}   (min / median ms)")
    g = torch.Generator().manual_seed(0)
    for shape in ((2, 1, 128, 128, 128), (1, 1, 224, 224, 160)):
        x = torch.rand(shape, generator=g) * 100
        x[x < 20] = 0
        cells = [timed(lambda: ops.moments(x, False, False), a.repeats),
                 timed(lambda: ops.moments(x, False, True), a.repeats),
                 timed(lambda: ops.normalize_intensity(x, [3.0], [7.0], False, False, torch.float32), a.repeats)]
        print(f"{'x'.join(map(str, shape)):>20} " + " ".join(f"{m:6.2f} / {md:5.2f}" for m, md in cells))


if __name__ == "__main__":
    main()
