#!/usr/bin/env python3
"""Swin UNETR training with voxaug's device-side augmentation, or with MONAI's, for comparison.

MONAI's SwinUNETR, DiceCE loss, AdamW, AMP, and MONAI's BTCV augmentation chain:

  --pipeline voxaug  deterministic preprocessing once, cached on the device (Orientation RAS,
                     Spacing 1.5x1.5x2.0, ScaleIntensityRange, CropForeground); per step on the
                     device, as one batch: RandCropByPosNegLabel x num_samples, RandFlip x3,
                     RandRotate90, RandShiftIntensity (voxaug); no DataLoader, no worker.
                     Validation with voxaug.inferers.sliding_window_inference.
  --pipeline monai   the same with MONAI's transforms as in its tutorials: CacheDataset with the
                     deterministic part + EnsureTyped(device), the random part per sample,
                     ThreadDataLoader(num_workers=0); monai.inferers.sliding_window_inference.

Data (--dataset): phantom (voxaug's synthetic CT-like phantom: subject i is
voxaug.phantom.phantom(1, size, K, data_seed, first_sample=i); train subjects 0..T-1, validation
T..T+V-1, the same subjects as the C++ trainer voxaug_swin_train), mricron (Colin27 T1 + 6 AAL
structures; one subject, so validation is on the training subject), msd (an MSD / BTCV
dataset.json folder).

Outputs in --out: train.csv (step, loss, lr, scale, data_ms, step_ms, elapsed_s, val_dice),
training_curve.png, validation.png, checkpoint.pt (the last step's model.state_dict() with
MONAI's keys), checkpoint_best.pt (the same at the best validation Dice, written when it
improves), summary.json, and a summary on stdout. Multi-GPU / multi-process: run under torchrun (DDP;
each rank its own training subjects and seed stream; validation sharded + all_reduce; rank 0
writes the files).

  python3 examples/swin_unetr/train.py --device cpu --steps 40            # tiny CPU run (8.5 min measured on 2 shared cores)
  python3 examples/swin_unetr/train.py --device cuda --steps 2000         # F=48, 96^3, bf16
  torchrun --nproc_per_node 2 examples/swin_unetr/train.py --device cpu --steps 4
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
try:  # a checkout without the editable install
    import voxaug  # noqa: F401
except ImportError:
    sys.path.insert(0, str(HERE.parents[1] / "python"))

import pipelines as P  # noqa: E402

CSV_COLUMNS = ["step", "loss", "lr", "scale", "data_ms", "step_ms", "elapsed_s", "val_dice"]


# ---------------------------------------------------------------- arguments
def _size3(text: str) -> tuple[int, int, int]:
    parts = [int(v) for v in text.replace("x", ",").split(",") if v]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"expected N or DxHxW (positive integers), got {text!r}")
    return tuple(parts)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("run")
    g.add_argument("--pipeline", choices=("voxaug", "monai"), default="voxaug",
                   help="augmentation pipeline (default voxaug)")
    g.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    g.add_argument("--steps", type=int, default=None, help="training steps (default: cpu 40, cuda 2000)")
    g.add_argument("--seed", type=int, default=0, help="seed of the model init, augmentation and subject order")
    g.add_argument("--out", type=Path, default=Path("out/swin_unetr"), help="output folder")
    g.add_argument("--log-every", type=int, default=10, help="progress line every N steps (0: off)")
    g.add_argument("--profile-data", action="store_true",
                   help="synchronise the device after the data path so data_ms includes its device time")
    g.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave as is)")
    g = ap.add_argument_group("data")
    g.add_argument("--dataset", choices=("phantom", "mricron", "msd"), default="phantom")
    g.add_argument("--data-dir", type=Path, help="msd: the folder holding dataset.json")
    g.add_argument("--phantom-size", type=_size3, default=None, help="phantom grid N or DxHxW (cpu 64, cuda 128x128x96)")
    g.add_argument("--train-subjects", type=int, default=None, help="phantom: T (cpu 4, cuda 24); msd: limit (0 all)")
    g.add_argument("--val-subjects", type=int, default=None, help="phantom: V (cpu 1, cuda 4); msd: limit (0 all)")
    g.add_argument("--num-classes", type=int, default=None, help="K incl. background (phantom 5, mricron 7, msd 14)")
    g.add_argument("--data-seed", type=int, default=0, help="phantom: seed of the generator (the data, not the run)")
    g.add_argument("--a-min", type=float, default=None, help="ScaleIntensityRange a_min (CT -175; mricron 0)")
    g.add_argument("--a-max", type=float, default=None, help="ScaleIntensityRange a_max (CT 250; mricron 255)")
    g = ap.add_argument_group("augmentation")
    g.add_argument("--roi", type=_size3, default=None, help="patch / window size N or DxHxW, multiples of 32, not all 32 (cpu 32x32x64, cuda 96)")
    g.add_argument("--num-samples", type=int, default=None, help="patches per volume per step = batch (cpu 2, cuda 4)")
    g.add_argument("--flip-prob", type=float, default=0.1)
    g.add_argument("--rot90-prob", type=float, default=0.1)
    g.add_argument("--shift-prob", type=float, default=0.5)
    g.add_argument("--heavy", action="store_true",
                   help="append RandAffine (p 0.2) + Rand3DElastic (p 0.2) + RandGaussianNoise (p 0.1) to both pipelines")
    g.add_argument("--fgbg-cache", action=argparse.BooleanOptionalAction, default=True,
                   help="both pipelines: cache RandCropByPosNegLabel's candidates once per volume "
                        "(FgBgToIndicesd: MONAI's index lists, voxaug's chunk counts)")
    g = ap.add_argument_group("model and optimisation")
    g.add_argument("--feature-size", type=int, default=None, help="SwinUNETR feature_size (cpu 12, cuda 48)")
    g.add_argument("--use-checkpoint", action=argparse.BooleanOptionalAction, default=None,
                   help="gradient checkpointing (default: on for cuda, off for cpu)")
    g.add_argument("--lr", type=float, default=1e-4)
    g.add_argument("--weight-decay", type=float, default=1e-5)
    g.add_argument("--clip-grad", type=float, default=0.0, help="clip the gradient norm (0: off)")
    g.add_argument("--amp", choices=("auto", "bf16", "fp16", "off"), default="auto",
                   help="autocast dtype; fp16 uses a GradScaler (default: bf16 on cuda, off on cpu)")
    g = ap.add_argument_group("validation")
    g.add_argument("--val-every", type=int, default=None, help="validate every N steps (cpu 10, cuda 200)")
    g.add_argument("--sw-batch-size", type=int, default=4)
    g.add_argument("--overlap", type=float, default=0.25)
    return ap


# CPU: SwinUNETR F=12 costs ~1.5-2.5 s per step per 32x32x64 patch on one core of the development
# host (measured), hence the tiny patch and batch: the smallest input that trains (32 on every axis
# leaves a 1-voxel bottleneck, where InstanceNorm cannot train; the 32x32 plane keeps RandRotate90's
# plane square).
CPU_DEFAULTS = dict(steps=40, phantom_size=(64, 64, 64), train_subjects=4, val_subjects=1, roi=(32, 32, 64),
                    num_samples=2, feature_size=12, val_every=20)
CUDA_DEFAULTS = dict(steps=2000, phantom_size=(128, 128, 96), train_subjects=24, val_subjects=4, roi=(96, 96, 96),
                     num_samples=4, feature_size=48, val_every=200)


def resolve(args: argparse.Namespace, device: torch.device) -> argparse.Namespace:
    defaults = CUDA_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.num_classes is None:
        args.num_classes = {"msd": 14, "mricron": 1 + len(P.AAL_STRUCTURES)}.get(args.dataset, 5)
    if args.a_min is None:
        args.a_min = 0.0 if args.dataset == "mricron" else -175.0
    if args.a_max is None:
        args.a_max = 255.0 if args.dataset == "mricron" else 250.0
    if args.use_checkpoint is None:
        args.use_checkpoint = device.type == "cuda"
    if args.amp == "auto":
        args.amp = "bf16" if device.type == "cuda" else "off"
    bad = [("--steps", args.steps, 1), ("--num-samples", args.num_samples, 1), ("--val-every", args.val_every, 1),
           ("--sw-batch-size", args.sw_batch_size, 1), ("--feature-size", args.feature_size, 12),
           ("--num-classes", args.num_classes, 2), ("--train-subjects", args.train_subjects, 0),
           ("--val-subjects", args.val_subjects, 0)]
    for name, v, lo in bad:
        if v < lo:
            raise SystemExit(f"train.py: {name} must be >= {lo}, got {v}")
    if args.feature_size % 12:
        raise SystemExit(f"train.py: --feature-size must be a multiple of 12 (SwinUNETR), got {args.feature_size}")
    if any(r % 32 or r < 32 for r in args.roi) or max(args.roi) < 64:
        raise SystemExit(f"train.py: --roi sides must be multiples of 32, not all 32 (SwinUNETR; 32^3 leaves a "
                         f"1-voxel bottleneck where InstanceNorm cannot train), got {args.roi}")
    if args.dataset == "phantom" and (args.train_subjects < 1 or args.val_subjects < 1):
        raise SystemExit("train.py: --train-subjects and --val-subjects must be >= 1 for the phantom")
    if args.dataset == "msd" and args.data_dir is None:
        raise SystemExit("train.py: --dataset msd needs --data-dir (the folder with dataset.json)")
    for name in ("flip_prob", "rot90_prob", "shift_prob"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise SystemExit(f"train.py: --{name.replace('_', '-')} must be in [0, 1]")
    if not 0.0 <= args.overlap < 1.0:
        raise SystemExit(f"train.py: --overlap must be in [0, 1), got {args.overlap}")
    if args.amp == "fp16" and device.type == "cpu":
        raise SystemExit("train.py: --amp fp16 needs cuda (use bf16 or off on cpu)")
    return args


# ---------------------------------------------------------------- distributed
class Dist:
    def __init__(self, device_arg: str):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        want_cuda = device_arg == "cuda" or (device_arg == "auto" and torch.cuda.is_available())
        if device_arg == "cuda" and not torch.cuda.is_available():
            raise SystemExit("train.py: --device cuda, but torch.cuda.is_available() is False")
        self.device = torch.device("cuda", self.local_rank) if want_cuda else torch.device("cpu")
        if want_cuda:
            torch.cuda.set_device(self.device)
        if self.world > 1:
            import torch.distributed as dist

            dist.init_process_group("nccl" if want_cuda else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_sum(self, values: list[float]) -> list[float]:
        if self.world == 1:
            return values
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.tolist()

    def close(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()
            dist.destroy_process_group()


# ---------------------------------------------------------------- data
def load_data(args, dist: Dist) -> tuple[list, list, str]:
    """This rank's training subjects and validation shard, and a description."""
    dev = dist.device
    if args.dataset == "phantom":
        t, v = args.train_subjects, args.val_subjects
        mine = [i for i in range(t) if i % dist.world == dist.rank] or [dist.rank % t]
        val_ids = [t + j for j in range(v) if j % dist.world == dist.rank]
        train = P.phantom_subjects(mine, args.phantom_size, args.num_classes, args.data_seed, dev)
        val = P.phantom_subjects(val_ids, args.phantom_size, args.num_classes, args.data_seed, dev)
        desc = (f"phantom {'x'.join(map(str, args.phantom_size))} (data seed {args.data_seed}): train subjects "
                f"0..{t - 1}, validation {t}..{t + v - 1}")
    elif args.dataset == "mricron":
        s = P.mricron_subject(dev)
        train, val = [s], ([s] if dist.rank == 0 else [])
        desc = (f"mricron ch2 + AAL ({', '.join(P.AAL_STRUCTURES)}): ONE subject, validation on the training "
                "subject (not held out)")
    else:
        tr, va = P.msd_subjects(args.data_dir, torch.device("cpu"), args.train_subjects, args.val_subjects)
        train = [s for i, s in enumerate(tr) if i % dist.world == dist.rank] or [tr[dist.rank % len(tr)]]
        val = [s for j, s in enumerate(va) if j % dist.world == dist.rank]
        desc = f"msd {args.data_dir}: {len(tr)} training, {len(va)} validation cases"
    return train, val, desc


def make_pipeline(args, dist: Dist, train: list, val: list):
    cfg = P.AugConfig(roi=tuple(args.roi), num_samples=args.num_samples, a_min=args.a_min, a_max=args.a_max,
                      flip_prob=args.flip_prob, rot90_prob=args.rot90_prob, shift_prob=args.shift_prob,
                      fgbg_cache=args.fgbg_cache, heavy=args.heavy)
    seed = args.seed + 1_000_003 * dist.rank  # each rank its own seed stream
    order_seed = args.seed * 7919 + dist.rank + 1
    if args.pipeline == "voxaug":
        return P.VoxaugPipeline(train, val, cfg, dist.device, seed, order_seed, args.profile_data)
    return P.MonaiPipeline(train, val, cfg, dist.device, seed, order_seed, args.steps, args.profile_data)


# ---------------------------------------------------------------- model, validation
def make_model(args, device: torch.device) -> torch.nn.Module:
    from monai.networks.nets import SwinUNETR

    torch.manual_seed(args.seed)  # the same initial weights for both pipelines
    return SwinUNETR(in_channels=1, out_channels=args.num_classes, feature_size=args.feature_size,
                     use_checkpoint=args.use_checkpoint).to(device)


def autocast(args, device: torch.device):
    if args.amp == "off":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16 if args.amp == "bf16" else torch.float16)


def nvtx(name: str, device: torch.device):
    """An NVTX range on CUDA (the C++ trainer's stage names: data, forward, backward, step,
    validation), so a profiler shows the same breakdown for both; nothing on the CPU."""
    return torch.cuda.nvtx.range(name) if device.type == "cuda" else contextlib.nullcontext()


def validate(model, pipe, args, dist: Dist) -> tuple[float, Optional[tuple]]:
    """Mean Dice (MONAI DiceMetric, include_background=False, 'mean' reduction: the mean of the
    non-NaN (subject, class) entries) over all ranks' shards; and rank 0's first volume with its
    prediction for the figure."""
    from monai.metrics import DiceMetric
    from monai.networks.utils import one_hot

    model.eval()
    metric = DiceMetric(include_background=False, reduction="none")
    first = None
    with torch.no_grad(), autocast(args, dist.device), nvtx("validation", dist.device):
        for i, (img, lab) in enumerate(pipe.val_items):
            logits = pipe.inferer(img, tuple(args.roi), args.sw_batch_size, model, overlap=args.overlap)
            pred = torch.argmax(logits, dim=1, keepdim=True)
            metric(y_pred=one_hot(pred, args.num_classes), y=one_hot(lab.long(), args.num_classes))
            if i == 0:
                first = (img, lab, pred)
    model.train()
    if len(pipe.val_items):
        per = metric.aggregate().float()  # (subjects, classes - 1), NaN where the class is absent
        ok = ~torch.isnan(per)
        s, n = float(per[ok].sum()), float(ok.sum())
    else:
        s, n = 0.0, 0.0
    s, n = dist.all_sum([s, n])
    return (s / n if n else float("nan")), first


# ---------------------------------------------------------------- outputs
def machine(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        model = ""
    return f"{model or platform.processor() or 'cpu'}, {torch.get_num_threads()} threads"


def write_figures(out: Path, rows: list[dict], first, args, title: str) -> None:
    import plotting

    steps = np.array([r["step"] for r in rows], float)
    loss = np.array([r["loss"] for r in rows], float)
    vr = [r for r in rows if r["val_dice"] != ""]
    plotting.training_curve(out / "training_curve.png", steps, loss, np.array([r["step"] for r in vr], float),
                            np.array([r["val_dice"] for r in vr], float), title)
    if first is not None:
        img, lab, pred = (t[0, 0].float().cpu().numpy() for t in first)
        plotting.validation_slices(out / "validation.png", img, lab.astype(np.int32), pred.astype(np.int32),
                                   [title, "VALIDATION: TRUE VS PREDICTED"])


# ---------------------------------------------------------------- main
def main(argv: Optional[list[str]] = None) -> dict:
    args = build_parser().parse_args(argv)
    args._argv = argv
    threads = torch.get_num_threads()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    try:
        return _run(args)
    finally:
        torch.set_num_threads(threads)  # main() may be called in-process (tests, notebooks)


def _run(args: argparse.Namespace) -> dict:
    argv = args._argv
    dist = Dist(args.device)
    device = dist.device
    args = resolve(args, device)
    from monai.losses import DiceCELoss

    t_wall = time.perf_counter()
    train, val, data_desc = load_data(args, dist)
    pipe = make_pipeline(args, dist, train, val)
    model = make_model(args, device)
    net = model
    if dist.world > 1:
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                                        else None)
    loss_fn = DiceCELoss(to_onehot_y=True, softmax=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    scaler = torch.amp.GradScaler(device.type) if args.amp == "fp16" else None
    if dist.main:
        args.out.mkdir(parents=True, exist_ok=True)
        n_params = sum(p.numel() for p in model.parameters())
        print(f"swin_unetr train.py: pipeline {args.pipeline}, device {device} ({machine(device)}), world {dist.world}")
        print(f"data: {data_desc}; preprocessing {pipe.preprocess_s:.1f} s")
        print(f"model: SwinUNETR(1, {args.num_classes}, feature_size={args.feature_size}, use_checkpoint="
              f"{args.use_checkpoint}), {n_params:,} parameters; roi {args.roi}, batch {args.num_samples}, "
              f"amp {args.amp}, AdamW lr {args.lr:g} wd {args.weight_decay:g}")

    rows: list[dict] = []
    best, best_step, first = -1.0, 0, None
    t0 = time.perf_counter()
    train_s = 0.0
    for step in range(1, args.steps + 1):
        ts = time.perf_counter()
        with nvtx("data", device):
            img, lab = pipe.next_batch()
        with autocast(args, device), nvtx("forward", device):
            logits = net(img)
            loss = loss_fn(logits, lab)
        opt.zero_grad(set_to_none=True)
        with nvtx("backward", device):
            (scaler.scale(loss) if scaler is not None else loss).backward()
        with nvtx("step", device):
            if scaler is not None:
                if args.clip_grad > 0:
                    scaler.unscale_(opt)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
                scaler.step(opt)
                scaler.update()
            else:
                if args.clip_grad > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
                opt.step()
        loss_v = float(loss.detach())  # syncs: the step is done
        step_ms = (time.perf_counter() - ts) * 1e3
        train_s += step_ms / 1e3
        if not math.isfinite(loss_v) and scaler is None:
            raise SystemExit(f"train.py: the loss became {loss_v} at step {step}")
        dice: Any = ""
        if step % args.val_every == 0 or step == args.steps:
            d, fv = validate(net.module if dist.world > 1 else net, pipe, args, dist)
            dice, first = d, (fv if fv is not None else first)
            if d > best:
                best, best_step = d, step
                if dist.main:  # the best model so far (MONAI's keys), as the C++ trainer keeps it
                    torch.save(model.state_dict(), args.out / "checkpoint_best.pt")
        row = {"step": step, "loss": loss_v, "lr": opt.param_groups[0]["lr"],
               "scale": scaler.get_scale() if scaler is not None else 1.0, "data_ms": pipe.data_ms[-1],
               "step_ms": step_ms, "elapsed_s": time.perf_counter() - t0, "val_dice": dice}
        rows.append(row)
        if dist.main and args.log_every and (step % args.log_every == 0 or step == args.steps or dice != ""):
            rate = step / train_s
            eta = (args.steps - step) / rate if rate > 0 else float("nan")
            vd = f" val_dice {dice:.4f}" if dice != "" else ""
            print(f"step {step:>6}/{args.steps} loss {loss_v:.4f} {rate:.2f} steps/s data {row['data_ms']:.1f} ms "
                  f"ETA {eta:.0f} s{vd}", flush=True)
    wall = time.perf_counter() - t_wall
    summary = {
        "pipeline": args.pipeline, "dataset": args.dataset, "device": str(device), "machine": machine(device),
        "world_size": dist.world, "steps": args.steps, "train_s": train_s, "steps_per_s": args.steps / train_s,
        "mean_data_ms": float(np.mean(pipe.data_ms)), "median_data_ms": float(np.median(pipe.data_ms)),
        "mean_step_ms": 1e3 * train_s / args.steps, "best_dice": best, "best_step": best_step,
        "final_dice": next((r["val_dice"] for r in reversed(rows) if r["val_dice"] != ""), float("nan")),
        "first_loss": rows[0]["loss"], "last_loss": rows[-1]["loss"], "loop_s": rows[-1]["elapsed_s"],
        "wall_s": wall, "preprocess_s": pipe.preprocess_s, "torch": torch.__version__, "seed": args.seed,
        "argv": sys.argv if argv is None else ["train.py", *argv],
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    if dist.main:
        with open(args.out / "train.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
            w.writeheader()
            for r in rows:
                w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
        torch.save(model.state_dict(), args.out / "checkpoint.pt")
        title = f"SWIN UNETR F{args.feature_size} {args.pipeline.upper()} {args.dataset.upper()}"
        write_figures(args.out, rows, first, args, title)
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
        print(f"summary: {args.steps} steps in {train_s:.1f} s of training = {summary['steps_per_s']:.3f} steps/s; "
              f"data path {summary['mean_data_ms']:.2f} ms/step (mean); best Dice {best:.4f} at step {best_step}; "
              f"wall time {wall:.1f} s (loop {summary['loop_s']:.1f} s)")
        print(f"wrote {args.out}/train.csv, training_curve.png, validation.png, checkpoint.pt, checkpoint_best.pt, "
              "summary.json")
    dist.close()
    return summary


if __name__ == "__main__":
    main()
    sys.exit(0)
