"""RandCoarseDropout (issue 5) on its own, in one process: the compare.py case (holes 4-8, sizes
16-48, prob 1) on 2x1x128^3 and 1x1x224x224x160 float32, with the fill MONAI uses by default
(U(min, max) of each sample: a min / max reduction, then Philox uniforms in the holes), a given
range (no reduction), and a constant (no random numbers), in place (MONAI writes into its input)
and out of place (voxaug's default), next to torch.aminmax and clone of the same volume for
scale. Prints the median ms of each. Compare builds with VOXAUG_LIBRARY=/path/to/libvoxaug_torch.so.

    python3 benchmarks/dropout_parts.py [--threads 2] [--repeats 50]
"""

import torch

import voxaug.degrade as vd

from bench_timing import median_ms, parse, parser, print_header

HOLES = dict(holes=4, spatial_size=16, max_holes=8, max_spatial_size=48, prob=1.0)


def main() -> None:
    ap = parser(__doc__, 50)
    args = parse(ap)
    if args.threads < 1 or args.repeats < 1:
        ap.error("--threads and --repeats must be >= 1")
    print_header()
    fills = (("U(min, max)", None), ("U(0, 1)", (0.0, 1.0)), ("constant 0", 0.0))
    print(f"{'shape':<16} {'fill':<12} {'in place ms':>12} {'out of place ms':>16}")
    for shape in ((2, 1, 128, 128, 128), (1, 1, 224, 224, 160)):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(shape, generator=g) * 100 + 500
        own = x.clone()  # written in place, call after call (as MONAI's private copy)
        text = "x".join(map(str, shape))
        for name, fill in fills:
            in_place = vd.RandCoarseDropout(**HOLES, fill_value=fill, seed=1, in_place=True)
            out_of_place = vd.RandCoarseDropout(**HOLES, fill_value=fill, seed=1)
            a = median_ms(lambda _: in_place(own), args.repeats)
            b = median_ms(lambda _: out_of_place(x), args.repeats)
            print(f"{text:<16} {name:<12} {a:>12.2f} {b:>16.2f}")
        print(f"{text:<16} {'(torch.aminmax / clone)':<29} {median_ms(lambda _: torch.aminmax(x), args.repeats):>12.2f} "
              f"{median_ms(lambda _: x.clone(), args.repeats):>16.2f}")


if __name__ == "__main__":
    main()
