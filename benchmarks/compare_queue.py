#!/usr/bin/env python3
"""Patch throughput of the MONAI BTCV random chain: voxaug vs MONAI, one process (issue 6).

The chain (REFERENCES.md section 1, MONAI's Swin UNETR BTCV tutorial), on volumes cached once:
RandCropByPosNegLabel(96^3, pos 1, neg 1, num_samples 4, image_threshold 0) -> RandFlip(axis 0, 1, 2;
p 0.1 each) -> RandRotate90(p 0.1, max_k 3) -> RandShiftIntensity(offsets 0.1, p 0.5), image (float32)
and label together. Subjects: the real ch2.nii.gz + aal.nii.gz (mricron-data; 181x217x181), repeated
--subjects times (MONAI's CacheDataset holds the deterministic part; here the volumes are the cached
data).
  monai        per subject: RandCropByPosNegLabeld -> 4 patch dicts, each through the flips, the
               rotation and the shift (MONAI runs random transforms per sample), as its DataLoader
               worker does (num_workers 0, in this process)
  voxaug       per subject: voxaug RandCropByPosNegLabeld(as_batch=True) (centres drawn on the
               device, 4 patches in one extraction) -> the same transforms on the (4, 1, 96^3) batch
  voxaug queue voxaug.crop.PatchQueue (max_length 16, samples_per_volume 4, batch 4, LabelSampler
               {0: 1, 1: 1} on the binarised label, TorchIO semantics) with the same transforms
               as its batch transform
Reported: patches per second over one epoch (median of --repeats epochs after one warm-up).
Each path checks its patches: shape (96^3), image values from the volume's range (+-0.1 shift),
labels from the atlas's label set. Then the memory a full queue holds: a PatchQueue of
--max-length patches after its first batch, the bytes of the distinct tensor storages in its
patches_list (TorchIO's Queue holds max_length patch subjects there).

    python3 benchmarks/compare_queue.py [--device cpu|cuda] [--subjects 8] [--repeats 3] [--max-length 64]
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time

import torch

import voxaug
from voxaug import crop as vc
from voxaug import transforms as vt


def load(device):
    import nibabel as nib
    import numpy as np

    root = "/usr/share/mricron/templates"
    img = torch.from_numpy(np.asarray(nib.load(f"{root}/ch2.nii.gz").dataobj).astype("float32") / 255.0)
    lab = torch.from_numpy(np.asarray(nib.load(f"{root}/aal.nii.gz").dataobj).astype("int64"))
    return img[None].to(device), lab[None].to(device)


def monai_chain():
    from monai import transforms as mt

    keys = ["image", "label"]
    crop = mt.RandCropByPosNegLabeld(keys=keys, label_key="label", spatial_size=(96, 96, 96), pos=1, neg=1,
                                     num_samples=4, image_key="image", image_threshold=0)
    rest = mt.Compose([mt.RandFlipd(keys=keys, prob=0.1, spatial_axis=0),
                       mt.RandFlipd(keys=keys, prob=0.1, spatial_axis=1),
                       mt.RandFlipd(keys=keys, prob=0.1, spatial_axis=2),
                       mt.RandRotate90d(keys=keys, prob=0.1, max_k=3),
                       mt.RandShiftIntensityd(keys="image", offsets=0.10, prob=0.5)])
    crop.set_random_state(0)
    rest.set_random_state(1)

    def run(subjects):
        out = []
        for s in subjects:
            for patch in crop(s):
                out.append(rest(patch))
        return out
    return run


def voxaug_rest():
    keys = ["image", "label"]
    return vt.Compose([vt.RandFlipd(keys=keys, prob=0.1, spatial_axis=0),
                       vt.RandFlipd(keys=keys, prob=0.1, spatial_axis=1),
                       vt.RandFlipd(keys=keys, prob=0.1, spatial_axis=2),
                       vt.RandRotate90d(keys=keys, prob=0.1, max_k=3),
                       vt.RandShiftIntensityd(keys="image", offsets=0.10, prob=0.5)])


def voxaug_chain():
    crop = vc.RandCropByPosNegLabeld(keys=["image", "label"], label_key="label", spatial_size=(96, 96, 96), pos=1,
                                     neg=1, num_samples=4, image_key="image", image_threshold=0, as_batch=True)
    rest = voxaug_rest()

    def run(subjects):
        out = []
        for s in subjects:
            out.append(rest(crop(s)))  # as_batch: one dict of (4, 1, 96, 96, 96) patches
        return out
    return run


def make_queue(subjects, max_length=16):
    sampler = vc.LabelSampler((96, 96, 96), label_name="fg", label_probabilities={0: 1, 1: 1}, check=False)
    rest = voxaug_rest()
    subs = [{"image": s["image"], "label": s["label"], "fg": (s["label"] > 0).to(torch.uint8)} for s in subjects]
    return vc.PatchQueue(subs, max_length=max_length, samples_per_volume=4, sampler=sampler, batch_size=4,
                         transform=lambda b: rest({"image": b["image"], "label": b["label"]}), seed=0)


def voxaug_queue(subjects):
    queue = make_queue(subjects)

    def run(_):
        return list(queue)
    return run


def held_bytes(obj, seen=None) -> int:
    """Bytes of the distinct tensor storages reachable through lists, tuples and dicts."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        st = obj.untyped_storage()
        if st.data_ptr() in seen:
            return 0
        seen.add(st.data_ptr())
        return st.nbytes()
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(held_bytes(v, seen) for v in obj)
    return 0


def count_and_check(out, lo, hi, labels):
    n = 0
    for item in out:
        img, lab = item["image"], item["label"]
        img = img if img.dim() == 5 else img[None]
        lab = lab if lab.dim() == 5 else lab[None]
        assert tuple(img.shape[2:]) == (96, 96, 96) and tuple(lab.shape[2:]) == (96, 96, 96), img.shape
        assert float(img.min()) >= lo - 0.1 - 1e-6 and float(img.max()) <= hi + 0.1 + 1e-6
        assert set(torch.unique(torch.as_tensor(lab)).tolist()) <= labels
        n += img.shape[0]
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--subjects", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-length", type=int, default=64)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    img, lab = load(device)
    subjects = [{"image": img, "label": lab} for _ in range(args.subjects)]
    lo, hi = float(img.min()), float(img.max())
    labels = set(torch.unique(lab).tolist())
    import monai

    print(f"date     {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    print(f"command  {' '.join(sys.argv)}")
    print(f"versions torch {torch.__version__}, monai {monai.__version__}, voxaug {voxaug.__version__}; "
          f"torch threads {torch.get_num_threads()}, device {device}")
    print(f"epoch    {args.subjects} subjects (ch2 + aal, 181x217x181) x 4 patches of 96^3; median of "
          f"{args.repeats} epochs after 1 warm-up\n")
    rows = {}
    for name, run in (("monai", monai_chain()), ("voxaug", voxaug_chain()), ("voxaug queue", voxaug_queue(subjects))):
        times = []
        for i in range(args.repeats + 1):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            out = run(subjects)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i:
                times.append(time.perf_counter() - t)
            n = count_and_check(out, lo, hi, labels)
        t = statistics.median(times)
        rows[name] = n / t
        print(f"{name:<13} {n:>4} patches  {t * 1e3:>9.1f} ms/epoch  {n / t:>8.1f} patches/s")
    for name in ("voxaug", "voxaug queue"):
        print(f"{name} / monai: {rows[name] / rows['monai']:.2f}x")
    queue = make_queue(subjects * (args.max_length // (4 * len(subjects)) + 1), args.max_length)
    next(iter(queue))
    print(f"\nqueue of max_length {args.max_length} after its first batch: {queue.num_patches} patches held, "
          f"{held_bytes(queue.patches_list) / 1024:.1f} KiB of tensors in patches_list")
    return 0


if __name__ == "__main__":
    sys.exit(main())
