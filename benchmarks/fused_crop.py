"""Crop fused with the spatial steps after it (voxaug.transforms.Compose, issue 6) vs the same
Compose with fuse_spatial=False (crop, then each step), on ch2 + aal (181x217x181), 4 x 96^3
patches of image + label, in one process. Two chains: the BTCV chain (RandCropByPosNegLabeld
-> RandFlipd x3 -> RandRotate90d -> RandShiftIntensityd, exact steps) and crop -> RandAffined
(rotation +-0.3 rad, scale +-0.1: interpolating). Prints the median wall time of 7 calls.

    OMP_NUM_THREADS=1 python3 benchmarks/fused_crop.py [--threads 1] [--device cpu|cuda]
"""
import argparse
import datetime
import platform
import time

import nibabel as nib
import numpy as np
import torch

import voxaug
from voxaug import crop as vc
from voxaug import spatial as vs
from voxaug import transforms as vt

T = "/usr/share/mricron/templates/"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    img = torch.from_numpy(np.asarray(nib.load(T + "ch2.nii.gz").dataobj).astype(np.float32))[None, None].to(dev)
    lab = torch.from_numpy(np.asarray(nib.load(T + "aal.nii.gz").dataobj).astype(np.uint8))[None, None].to(dev)
    keys = ["image", "label"]

    def btcv(p):
        return [vs.RandFlipd(keys, prob=p, spatial_axis=0), vs.RandFlipd(keys, prob=p, spatial_axis=1),
                vs.RandFlipd(keys, prob=p, spatial_axis=2), vs.RandRotate90d(keys, prob=p, max_k=3),
                vt.RandShiftIntensityd(["image"], offsets=0.1, prob=0.5)]

    affine = [vs.RandAffined(keys, prob=1.0, rotate_range=(0.3,) * 3, scale_range=(0.1,) * 3,
                             mode=("bilinear", "nearest"), padding_mode="zeros")]
    cases = [("BTCV chain, flip/rot90 p 0.1", btcv(0.1)), ("BTCV chain, flip/rot90 p 1", btcv(1.0)),
             ("crop + RandAffined", affine)]
    print(f"date {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}  "
          f"machine {platform.processor() or platform.machine()} ({dev}), threads {torch.get_num_threads()}, "
          f"torch {torch.__version__}, voxaug {voxaug.__version__}")
    print(f"{'chain':32s} {'fused ms':>9s} {'unfused ms':>11s} {'ratio':>6s}")
    for name, tail in cases:
        ms = {}
        for fuse in (True, False):
            c = vt.Compose([vc.RandCropByPosNegLabeld(keys, "label", (96, 96, 96), num_samples=4, as_batch=True)]
                           + tail, fuse_spatial=fuse).set_random_state(0)
            c({"image": img, "label": lab})
            ts = []
            for _ in range(a.repeats):
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t = time.perf_counter()
                c({"image": img, "label": lab})
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                ts.append(time.perf_counter() - t)
            ms[fuse] = 1000 * float(np.median(ts))
        print(f"{name:32s} {ms[True]:9.1f} {ms[False]:11.1f} {ms[False] / ms[True]:5.2f}x")


if __name__ == "__main__":
    main()
