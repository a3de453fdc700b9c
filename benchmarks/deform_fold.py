"""Cost of steps after a deformation in a voxaug Compose: Rand3DElasticd alone, Rand3DElasticd +
RandFlipd x 3 (prob 0.5; the flips fold into the deformation's gather) and the same Compose with
fuse_spatial=False (the deformation's gather, then the flips), on ch2 + aal (181x217x181, image
bilinear + label nearest), interleaved calls in one process, median ms.

    python3 benchmarks/deform_fold.py [--calls 5] [--threads 2]
"""
import argparse
import time

import torch

from compare import load_ch2_aal
import voxaug.deform as vd
import voxaug.spatial as vs
from voxaug import transforms as vt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    img, lab = load_ch2_aal(torch.device("cpu"))
    keys = ["image", "label"]
    ranges = dict(rotate_range=(0.1, 0.1, 0.1), scale_range=(0.05, 0.05, 0.05))

    def elastic():
        return vd.Rand3DElasticd(keys, (5, 8), (100, 200), prob=1.0, mode=("bilinear", "nearest"),
                                 padding_mode="zeros", seed=0, **ranges)

    def flips():
        return [vs.RandFlipd(keys, prob=0.5, spatial_axis=a) for a in range(3)]

    cases = {"elastic": vt.Compose([elastic()]), "elastic + flips (folded)": vt.Compose([elastic()] + flips()),
             "elastic + flips, fuse_spatial=False": vt.Compose([elastic()] + flips(), fuse_spatial=False)}
    for _ in range(2):
        for f in cases.values():
            f({"image": img, "label": lab})
    times = {k: [] for k in cases}
    for _ in range(args.calls):
        for k, f in cases.items():
            t = time.perf_counter()
            f({"image": img, "label": lab})
            times[k].append(time.perf_counter() - t)
    print(f"{args.threads} threads, median of {args.calls} interleaved calls")
    for k, v in times.items():
        print(f"{k:40s} {sorted(v)[len(v) // 2] * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
