"""Cost of a CPU pointwise chain's output pass against torch's own `x + 1` (and its cast).

A one-step chain (a shift) reads and writes each voxel once, as torch's add does; this prints
the median of interleaved calls of both, per output dtype, and their ratio. To compare two builds
of the ops library (e.g. before / after a change to how outputs are stored) run this once with
each, `VOXAUG_LIBRARY=/path/to/libvoxaug_torch.so python3 benchmarks/pointwise_store.py`, in
alternate processes (this VM's timings drift by tens of percent).

    python3 benchmarks/pointwise_store.py [--threads 2] [--shapes 1x1x224x224x160,2x1x128x128x128]
        [--dtypes float32,float16,bfloat16] [--calls 60] [--half-input]
"""
import argparse
import time

import torch

import voxaug
from voxaug import ops


def median_ms(ts):
    ts = sorted(ts)
    return ts[len(ts) // 2] * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", default="1x1x224x224x160,2x1x128x128x128")
    ap.add_argument("--dtypes", default="float32,float16,bfloat16")
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--half-input", action="store_true", help="float16 input, float16 output, also in place")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"voxaug {voxaug.__version__}, ops library {voxaug._library_path()}, {args.threads} threads, "
          f"median of {args.calls} interleaved calls")
    step = [ops.Step(ops.SHIFT_INTENSITY, 0, (1.0,))]
    for text in args.shapes.split(","):
        shape = tuple(int(v) for v in text.split("x"))
        cases = ([("float16 in / out", torch.float16, torch.float16)] if args.half_input else
                 [(f"float32 -> {d}", torch.float32, getattr(torch, d)) for d in args.dtypes.split(",")])
        for name, din, dout in cases:
            x = torch.randn(*shape).to(din)
            funcs = {"torch": lambda: (x + 1).to(dout), "chain": lambda: ops.pointwise_chain(x, step, dtype=dout)}
            if args.half_input:
                funcs["in place"] = lambda: ops.pointwise_chain_(x, step)
            for f in funcs.values():
                for _ in range(5):
                    f()
            times = {k: [] for k in funcs}
            for _ in range(args.calls):
                for k, f in funcs.items():
                    t = time.perf_counter()
                    f()
                    times[k].append(time.perf_counter() - t)
            ms = {k: median_ms(v) for k, v in times.items()}
            cols = "  ".join(f"{k} {v:.2f} ms" for k, v in ms.items())
            print(f"{text:18s} {name:18s} {cols}  chain / torch {ms['chain'] / ms['torch']:.2f}")


if __name__ == "__main__":
    main()
