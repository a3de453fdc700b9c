#!/usr/bin/env python3
"""Sliding-window inference with a checkpoint of the Swin UNETR trainers (train.cpp / train.py).

Loads checkpoint.pt (a MONAI SwinUNETR state dict: the C++ trainer writes MONAI's names and
shapes) into MONAI's SwinUNETR, regenerates the held-out phantom subjects the trainer validated
on (voxaug.phantom, the same seed and subject indices), preprocesses them as the trainer does
(ScaleIntensityRange(-175, 250 -> 0, 1, clip), CropForeground(image > 0), SpatialPad(roi)) and
runs, on each, voxaug's sliding_window_inference and MONAI's with the same network, roi,
sw_batch_size, overlap and blending. Prints per subject the Dice per class of both predictions
against the phantom's labels (MONAI DiceMetric, background excluded), how many voxels the two
argmax predictions differ in, the largest difference of the blended probabilities, and the time
of each inferer (median of --repeats after a warm-up), then their ratio.

    python3 examples/swin_unetr/infer.py --checkpoint out/demo/train/checkpoint.pt
        [--device auto|cpu|cuda] [--seed 0] [--train-subjects 6] [--val-subjects 2]
        [--phantom-size 48,48,64] [--roi 32,32,64] [--sw-batch-size 4] [--overlap 0.25] [--repeats 3]

Defaults: the C++ trainer's CPU subjects at --phantom-size 48,48,64 (scripts/demo.sh's CPU run
trains on them with 32 x 32 x 64 patches); for the C++ trainer's CUDA defaults pass
--train-subjects 24 --val-subjects 6 --phantom-size 160x160x128 --roi 96. The roi needs a side
of 64 or more: at 32^3 the deepest hidden state is one voxel and MONAI's InstanceNorm refuses it.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

try:
    import voxaug  # noqa: F401
except ImportError:  # a checkout without the editable install
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from voxaug import phantom as P
from voxaug import spatial as S
from voxaug import transforms as T
from voxaug.inferers import sliding_window_inference as voxaug_swi


def size3(text: str) -> list[int]:
    parts = [int(p) for p in text.replace("x", ",").split(",")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or any(p < 1 for p in parts):
        raise argparse.ArgumentTypeError(f"expected N or D,H,W (positive), got {text!r}")
    return parts


def dice_per_class(pred: torch.Tensor, label: torch.Tensor, num_classes: int) -> list[float]:
    """MONAI DiceMetric(include_background=False) of one volume: NaN where the class is absent
    from the label."""
    out = []
    for k in range(1, num_classes):
        p, t = pred == k, label == k
        denom = int(p.sum()) + int(t.sum())
        out.append(float("nan") if int(t.sum()) == 0 else 2.0 * int((p & t).sum()) / denom)
    return out


def timed(fn, device: torch.device, repeats: int):
    out = fn()  # warm-up
    ms = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        ms.append((time.perf_counter() - t0) * 1e3)
    return out, statistics.median(ms)


def main(argv=None) -> list[dict]:
    """Runs the comparison; returns one dict per subject (Dice lists, differences, times)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--seed", type=int, default=0, help="the trainer's --seed (the phantom data seed)")
    ap.add_argument("--train-subjects", type=int, default=6, help="the trainer's --phantom-train")
    ap.add_argument("--val-subjects", type=int, default=2, help="the trainer's --phantom-val")
    ap.add_argument("--phantom-size", type=size3, default=[48, 48, 64])
    ap.add_argument("--roi", type=size3, default=[32, 32, 64])
    ap.add_argument("--sw-batch-size", type=int, default=4)
    ap.add_argument("--overlap", type=float, default=0.25)
    ap.add_argument("--mode", choices=("constant", "gaussian"), default="constant")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave as is)")
    args = ap.parse_args(argv)
    if args.train_subjects < 0 or args.val_subjects < 1:
        ap.error("--train-subjects must be >= 0 and --val-subjects >= 1")
    if any(r % 32 for r in args.roi) or max(args.roi) < 64:
        ap.error(f"--roi must be multiples of 32 with a side >= 64 (MONAI's SwinUNETR), got {args.roi}")
    if not 0 <= args.overlap < 1:
        ap.error(f"--overlap must be in [0, 1), got {args.overlap}")
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    if not args.checkpoint.is_file():
        ap.error(f"--checkpoint: {args.checkpoint} not found (run the trainer first)")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))

    from monai.inferers import sliding_window_inference as monai_swi
    from monai.networks.nets import SwinUNETR

    state = torch.load(args.checkpoint, map_location="cpu")  # weights_only: a plain tensor dict
    num_classes = state["out.conv.conv.weight"].shape[0]
    feature = state["swinViT.patch_embed.proj.weight"].shape[0]
    net = SwinUNETR(in_channels=1, out_channels=num_classes, feature_size=feature)
    net.load_state_dict(state, strict=True)
    net = net.to(device).eval()
    print(f"checkpoint {args.checkpoint}: MONAI SwinUNETR(feature_size {feature}, {num_classes} classes), "
          f"loaded strict; device {device}, roi {args.roi}, sw_batch_size {args.sw_batch_size}, "
          f"overlap {args.overlap}, mode {args.mode}")

    keys = ["image", "label"]
    prep = T.Compose([
        T.ScaleIntensityRanged("image", a_min=-175.0, a_max=250.0, b_min=0.0, b_max=1.0, clip=True),
        S.CropForegroundd(keys, source_key="image", allow_smaller=True),
        S.SpatialPadd(keys, spatial_size=list(args.roi)),
    ])
    kw = dict(roi_size=list(args.roi), sw_batch_size=args.sw_batch_size, predictor=net,
              overlap=args.overlap, mode=args.mode)
    print("| subject | size | Dice voxaug (per class) | Dice MONAI (per class) | argmax differs | "
          "max prob diff | voxaug ms | MONAI ms | MONAI / voxaug |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    with torch.no_grad():
        for i in range(args.train_subjects, args.train_subjects + args.val_subjects):
            img, lab = P.phantom(1, args.phantom_size, num_classes=num_classes, seed=args.seed, first_sample=i,
                                 device=device)
            d = prep({"image": img[0], "label": lab[0]})
            x = d["image"].as_tensor() if hasattr(d["image"], "as_tensor") else d["image"]
            y = d["label"].as_tensor() if hasattr(d["label"], "as_tensor") else d["label"]
            x, y = x[None].float().contiguous(), y[None].long()
            pv, tv = timed(lambda: torch.softmax(voxaug_swi(x, **kw), 1), device, args.repeats)
            pm, tm = timed(lambda: torch.softmax(monai_swi(x, **kw), 1), device, args.repeats)
            av, am = pv.argmax(1, keepdim=True), pm.argmax(1, keepdim=True)
            dv, dm = dice_per_class(av, y, num_classes), dice_per_class(am, y, num_classes)
            fmt = lambda v: " ".join("-" if x != x else f"{x:.3f}" for x in v)  # noqa: E731
            rows.append({"subject": i, "dice_voxaug": dv, "dice_monai": dm, "argmax_differs": int((av != am).sum()),
                         "max_prob_diff": float((pv - pm).abs().max()), "voxaug_ms": tv, "monai_ms": tm})
            print(f"| phantom_{i} | {'x'.join(map(str, x.shape[2:]))} | {fmt(dv)} | {fmt(dm)} | "
                  f"{int((av != am).sum())} | {float((pv - pm).abs().max()):.2e} | {tv:.1f} | {tm:.1f} | "
                  f"{tm / tv:.2f}x |")
    ratio = statistics.median(r["monai_ms"] / r["voxaug_ms"] for r in rows)
    print(f"inference: MONAI / voxaug time {ratio:.2f}x (median over subjects)")
    return rows


if __name__ == "__main__":
    main()
