"""Shared by the small single-op benchmark scripts (patch_gather.py, window_parts.py,
dropout_parts.py, ...): their common options, the median wall time of repeated calls, a timed
predictor wrapper, and the header that says when, where and with which library a table was
measured."""
import argparse
import datetime
import platform
import time

import torch


def parser(doc: str, repeats: int) -> argparse.ArgumentParser:
    """The scripts' options: the docstring as help, --threads (default 2), --repeats."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=repeats)
    return ap


def parse(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """The parsed options, torch's thread count set from --threads."""
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    return args


def median_ms(fn, repeats: int, warmup: int = 1) -> float:
    """Median ms of `repeats` calls fn(i) (i: the call's index) after `warmup` calls."""
    for i in range(warmup):
        fn(i)
    ts = []
    for i in range(repeats):
        t0 = time.perf_counter()
        fn(i)
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


class Timed:
    """Wraps a predictor (network) and accumulates its own wall time in .seconds (synchronised
    on CUDA), so that a harness can report the time outside it."""

    def __init__(self, fn, device):
        self.fn, self.device, self.seconds = fn, torch.device(device), 0.0

    def __call__(self, x):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        y = self.fn(x)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.seconds += time.perf_counter() - t
        return y


def print_header() -> None:
    """Date (UTC), machine, torch threads and versions, and the ops library loaded."""
    import voxaug

    print(f"date     {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"machine  {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}")
    print(f"versions torch {torch.__version__}, voxaug {voxaug.__version__}, library {voxaug.library_path}")
