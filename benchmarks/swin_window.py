#!/usr/bin/env python3
"""Sliding-window inference with MONAI's SwinUNETR (feature_size 48): voxaug vs MONAI end to end (GPU).

Issue 7's device benchmark: on 1x1x512x512x77 and 1x1x255x223x276, overlap 0.25 and 0.8, each
library at sw_batch_size 1, 2, 4, 8, 16; the ratio of each one's best time is the result (bar:
voxaug >= 1.3x faster). The network (random weights, eval, torch.autocast float16 as MONAI's
AMP validation) and the input are shared; outputs must agree (max abs difference <= 1e-3 in
float32 after AMP; both libraries feed the predictor the same windows in the same batches).

    python3 benchmarks/swin_window.py [--device cuda] [--budget 240] [--sizes 512x512x77,255x223x276]
                                      [--overlaps 0.25,0.8] [--sw 1,2,4,8,16] [--repeats 2]

--budget (seconds) stops starting new cases once spent; the table lists what ran. On the CPU it
runs (slowly) only to check the script; the bar applies to an H200.
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time

import torch

import voxaug
from voxaug.inferers import sliding_window_inference

BAR = 1.3


def timed(fn, device, repeats):
    ts, out = [], None
    for i in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i:
            ts.append(time.perf_counter() - t)
    return statistics.median(ts), out


def main(argv=None) -> int:
    from monai.inferers import sliding_window_inference as monai_swi
    from monai.networks.nets import SwinUNETR

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget", type=float, default=240.0)
    ap.add_argument("--sizes", default="512x512x77,255x223x276")
    ap.add_argument("--overlaps", default="0.25,0.8")
    ap.add_argument("--sw", default="1,2,4,8,16")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("swin_window: no CUDA device", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    try:
        net = SwinUNETR(in_channels=1, out_channels=14, feature_size=48)
    except TypeError:  # MONAI < 1.5 needs img_size
        net = SwinUNETR(img_size=(96, 96, 96), in_channels=1, out_channels=14, feature_size=48)
    net = net.to(device).eval()
    amp = device.type == "cuda"

    def predictor(x):
        with torch.autocast(device.type, dtype=torch.float16, enabled=amp):
            return net(x)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"date    {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}")
    print(f"command {' '.join(sys.argv)}\ndevice  {name}; torch {torch.__version__}, voxaug {voxaug.__version__}")
    head = f"{'size':<12} {'overlap':>7} {'sw':>3} {'monai s':>8} {'voxaug s':>8} {'ratio':>6} {'maxdiff':>8}"
    print(head + "\n" + "-" * len(head))
    start, best, ok = time.perf_counter(), {}, True
    for size in args.sizes.split(","):
        shape = (1, 1, *map(int, size.split("x")))
        x = torch.randn(shape, device=device)
        for ov in map(float, args.overlaps.split(",")):
            for sw in map(int, args.sw.split(",")):
                if time.perf_counter() - start > args.budget:
                    print(f"(budget of {args.budget:.0f} s spent: remaining cases not run)")
                    break
                with torch.no_grad():
                    tm, ym = timed(lambda: monai_swi(x, (96, 96, 96), sw, predictor, overlap=ov, mode="gaussian"),
                                   device, args.repeats)
                    tv, yv = timed(lambda: sliding_window_inference(x, (96, 96, 96), sw, predictor, overlap=ov,
                                                                    mode="gaussian"), device, args.repeats)
                diff = (ym.float() - yv.float()).abs().max().item()
                ok &= diff <= 1e-3
                key = (size, ov)
                b = best.setdefault(key, [float("inf"), float("inf")])
                b[0], b[1] = min(b[0], tm), min(b[1], tv)
                print(f"{size:<12} {ov:>7.2f} {sw:>3} {tm:>8.3f} {tv:>8.3f} {tm / tv:>5.2f}x {diff:>8.1e}", flush=True)
    print()
    worst = float("inf")
    for (size, ov), (bm, bv) in best.items():
        worst = min(worst, bm / bv)
        print(f"best: {size} overlap {ov}: MONAI {bm:.3f} s, voxaug {bv:.3f} s, {bm / bv:.2f}x")
    if best and device.type == "cuda":
        print(f"BAR {'PASS' if worst >= BAR else 'FAIL'}: worst best-vs-best ratio {worst:.2f}x (issue 7: >= {BAR}x)")
    if not ok:
        print("CHECK FAILED: outputs differ by more than 1e-3", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
