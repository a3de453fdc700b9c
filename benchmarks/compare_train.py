#!/usr/bin/env python3
"""Swin UNETR training: voxaug's device-side augmentation vs MONAI's pipeline (issue 8).

Runs examples/swin_unetr/train.py twice, --pipeline voxaug and --pipeline monai, with the same
model, data, number of steps and seeds (each run in its own process, one after the other), and
reports from their train.csv / summary.json:

  steps/s            training steps per second (data path + forward + backward + optimiser;
                     validation excluded)
  data ms/step       mean time of the data path per step (the augmentation of one batch; for
                     MONAI measured around CacheDataset.__getitem__ in ThreadDataLoader's thread,
                     so on a GPU part of it overlaps the step); the ratio monai / voxaug
  time to Dice       loop wall time (validation included) at which the validation Dice first
                     reaches --target
  final / best Dice  the comparison counts only if both final Dices agree within --dice-tol (0.01)

Issue 8's bars: CPU: voxaug's data path >= 5x faster. H200 (F=48, 96^3, 4 patches, AMP):
augmentation under 3% of a step, time to the target Dice >= 1.5x shorter than MONAI's.

    python3 benchmarks/compare_train.py                       # CPU configuration (~10 min on 2 cores)
    python3 benchmarks/compare_train.py --device cuda --steps 1500 --target 0.8   # GPU (F=48, roi 96, bf16)
    python3 benchmarks/compare_train.py -- --lr 2e-4          # extra arguments for train.py after --
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Optional

import torch

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "examples" / "swin_unetr" / "train.py"

CPU_ARGS = ["--feature-size", "12", "--roi", "64x64x32", "--num-samples", "2", "--phantom-size", "64",
            "--train-subjects", "8", "--val-subjects", "2", "--val-every", "10", "--lr", "1e-3", "--amp", "off"]
CUDA_ARGS = ["--feature-size", "48", "--roi", "96", "--num-samples", "4", "--phantom-size", "128x128x96",
             "--train-subjects", "24", "--val-subjects", "4", "--val-every", "100", "--amp", "bf16",
             "--use-checkpoint", "--profile-data"]  # profile-data: data_ms includes the device time


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.processor())
    except OSError:
        return platform.processor() or "unknown CPU"


def read_csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def time_to(rows: list[dict], target: float) -> tuple[Optional[float], Optional[int]]:
    for r in rows:
        if r["val_dice"] not in ("", "nan") and float(r["val_dice"]) >= target:
            return float(r["elapsed_s"]), int(r["step"])
    return None, None


def data_path_only(args, batches: int, rounds: int = 4) -> list[dict]:
    """The data path alone, no model: ms per batch of each pipeline on the same subjects, median
    over `batches` batches after 3 warm-up batches, in this process with the run's thread count,
    the device synchronised after each batch. The pipelines take turns in `rounds` blocks (each
    block batches / rounds batches of each), so a busy spell of a shared machine falls on all
    of them alike; MONAI's random transforms run through its CacheDataset item access (what
    ThreadDataLoader's thread calls), here on the calling thread. Two pairs: both pipelines
    caching the crop candidates per volume (MONAI's fast-training tutorial: FgBgToIndicesd;
    voxaug: its chunk counts), and both scanning the label every call (MONAI's BTCV
    tutorial). Two configurations: the training runs' data settings, and BTCV's scale (4 x 96^3
    patches from larger volumes) where the training config is smaller."""
    sys.path.insert(0, str(TRAIN.parent))
    import pipelines as P

    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    configs = [("BTCV scale", (192, 192, 128), (96, 96, 96), 4)]
    if args.device == "cpu":
        configs.insert(0, ("training runs", (64, 64, 64), (64, 64, 32), 2))
    names = ("voxaug, cached", "monai, cached (fast tutorial)", "voxaug, per call",
             "monai, per call (BTCV tutorial)")
    results = []
    for label, size, roi, ns in configs:
        subj = P.phantom_subjects(range(8), size, 5, 0, dev)
        row = {"config": label, "phantom": size, "roi": roi, "num_samples": ns, "batches": batches,
               "rounds": rounds, "ms": {}}
        runs = {}
        for name in names:
            cfg = P.AugConfig(roi=roi, num_samples=ns, fgbg_cache="cached" in name)
            if name.startswith("voxaug"):
                pipe = P.VoxaugPipeline(subj, [], cfg, dev, args.seed, 1, profile_data=True)
                runs[name] = (pipe.next_batch, lambda p=pipe: p.data_ms)
            else:
                pipe = P.MonaiPipeline(subj, [], cfg, dev, args.seed, 1, 0, profile_data=True)
                order = P.SubjectOrder(len(subj), 1)
                runs[name] = (lambda p=pipe, o=order: p.timed[next(o)], lambda p=pipe: list(p.timed.times))
        for step, _ in runs.values():  # warm-up, not counted
            for _ in range(3):
                step()
        counted = {name: len(times()) for name, (_, times) in runs.items()}
        per_round = max(1, batches // rounds)
        for _ in range(rounds):
            for name, (step, _) in runs.items():
                for _ in range(per_round):
                    step()
        for name, (_, times) in runs.items():
            ms = sorted(times()[counted[name]:])
            row["ms"][name] = {"median_ms": ms[len(ms) // 2], "mean_ms": sum(ms) / len(ms)}
        del runs
        results.append(row)
    return results


def run(pipeline: str, args, extra: list[str]) -> dict:
    out = args.out / pipeline
    cmd = [sys.executable, str(TRAIN), "--pipeline", pipeline, "--device", args.device, "--steps", str(args.steps),
           "--seed", str(args.seed), "--out", str(out), "--log-every", str(args.log_every)]
    cmd += (CUDA_ARGS if args.device == "cuda" else CPU_ARGS) + extra
    env = dict(os.environ)
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
        cmd += ["--threads", str(args.threads)]
    print("$ " + shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)
    s = json.loads((out / "summary.json").read_text())
    s["rows"] = read_csv(out / "train.csv")
    s["cmd"] = shlex.join(cmd)
    return s


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--steps", type=int, default=None, help="steps per run (cpu 60, cuda 1500)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=None, help="target validation Dice (cpu 0.3, cuda 0.8)")
    ap.add_argument("--dice-tol", type=float, default=0.01, help="final Dices must agree within this (0.01)")
    ap.add_argument("--threads", type=int, default=None, help="OMP / torch threads per run (cpu 1; cuda: unset)")
    ap.add_argument("--out", type=Path, default=Path("out/compare_train"))
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--only", choices=("voxaug", "monai"), help="run one pipeline only (debugging)")
    ap.add_argument("--data-batches", type=int, default=40,
                    help="batches for the data-path-only measurement (0: skip it)")
    ap.add_argument("--data-only", action="store_true", help="only the data-path measurement, no training runs")
    args = ap.parse_args(argv)
    if args.steps is None:
        args.steps = 1500 if args.device == "cuda" else 40
    if args.target is None:
        args.target = 0.8 if args.device == "cuda" else 0.3
    if args.threads is None:
        args.threads = 1 if args.device == "cpu" else 0
    if args.steps < 1:
        ap.error("--steps must be >= 1")

    data_only = data_path_only(args, args.data_batches) if args.data_batches > 0 else None
    runs = [] if args.data_only else (["voxaug", "monai"] if args.only is None else [args.only])
    res = {p: run(p, args, extra) for p in runs}
    machine = cpu_model() if args.device == "cpu" else torch.cuda.get_device_name(0)
    if args.device == "cpu":
        machine += f", {os.cpu_count()} cores, {args.threads} thread(s) per run"
    print()
    print(f"date      {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    print(f"machine   {machine}")
    print(f"torch     {torch.__version__}")
    print(f"command   {shlex.join([sys.executable, *sys.argv])}")
    print(f"config    {args.steps} steps, seed {args.seed}, target Dice {args.target}; train.py "
          f"{' '.join((CUDA_ARGS if args.device == 'cuda' else CPU_ARGS) + extra)}")
    print()
    head = (f"| pipeline | steps/s | step ms | data ms/step | data share | time to Dice {args.target} (step) "
            f"| best Dice (step) | final Dice | loop s |")
    if res:
        print(head)
        print("|" + "---|" * 9)
    table = {}
    for p, s in res.items():
        t, st = time_to(s["rows"], args.target)
        share = s["mean_data_ms"] / s["mean_step_ms"]
        table[p] = {"steps_per_s": s["steps_per_s"], "mean_step_ms": s["mean_step_ms"],
                    "mean_data_ms": s["mean_data_ms"], "data_share": share, "time_to_target_s": t,
                    "target_step": st, "best_dice": s["best_dice"], "best_step": s["best_step"],
                    "final_dice": s["final_dice"], "loop_s": s["loop_s"], "cmd": s["cmd"]}
        ttd = f"{t:.1f} s ({st})" if t is not None else "not reached"
        print(f"| {p} | {s['steps_per_s']:.3f} | {s['mean_step_ms']:.0f} | {s['mean_data_ms']:.2f} | "
              f"{100 * share:.2f}% | {ttd} | {s['best_dice']:.4f} ({s['best_step']}) | {s['final_dice']:.4f} | "
              f"{s['loop_s']:.1f} |")
    verdict = {}
    if len(res) == 2:
        v, m = table["voxaug"], table["monai"]
        ratio = m["mean_data_ms"] / v["mean_data_ms"]
        same = abs(v["final_dice"] - m["final_dice"]) <= args.dice_tol
        print()
        print(f"data path: monai / voxaug = {ratio:.1f}x (CPU bar >= 5x: {'met' if ratio >= 5 else 'NOT met'})")
        print(f"steps/s: voxaug / monai = {v['steps_per_s'] / m['steps_per_s']:.2f}x")
        print(f"final Dice: voxaug {v['final_dice']:.4f}, monai {m['final_dice']:.4f}: "
              f"{'the same within' if same else 'NOT the same within'} {args.dice_tol} "
              f"({'the comparison counts' if same else 'the time-to-Dice comparison does not count'})")
        if v["time_to_target_s"] is not None and m["time_to_target_s"] is not None:
            print(f"time to Dice {args.target}: monai / voxaug = {m['time_to_target_s'] / v['time_to_target_s']:.2f}x")
        else:
            print(f"time to Dice {args.target}: not reached by "
                  + ", ".join(p for p in ("voxaug", "monai") if table[p]["time_to_target_s"] is None))
        verdict = {"data_ratio": ratio, "same_dice": same, "cpu_bar_met": ratio >= 5}
    if data_only is not None:
        print()
        print("data path alone (no model; median of the batches, device synchronised after each):")
        print("| config | pipeline (fg/bg candidates) | ms per batch (median) | mean | monai / voxaug |")
        print("|---|---|---|---|---|")
        for row in data_only:
            what = (f"{row['config']}: phantom {'x'.join(map(str, row['phantom']))}, {row['num_samples']} x "
                    f"{'x'.join(map(str, row['roi']))}, {row['batches']} batches")
            for name, r in row["ms"].items():
                base = row["ms"]["voxaug, cached" if "cached" in name else "voxaug, per call"]["median_ms"]
                print(f"| {what} | {name} | {r['median_ms']:.2f} | {r['mean_ms']:.2f} | "
                      f"{r['median_ms'] / base:.1f}x |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare_train.json").write_text(json.dumps(
        {"machine": machine, "torch": torch.__version__, "argv": sys.argv, "steps": args.steps, "target": args.target,
         "results": table, "verdict": verdict, "data_path_only": data_only}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
