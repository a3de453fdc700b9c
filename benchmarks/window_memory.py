"""Peak host memory of many-class sliding-window inference, labels as the result: MONAI
(sliding_window_inference, then argmax over its float32 probabilities) against voxaug
(argmax=True, uint8 labels: the accumulator a ring of one window row's roi-d planes). Each run
in a fresh process (ru_maxrss is a process's peak); the predictor is a stand-in that costs no
memory of its own (the window broadcast to K channels, plus a per-channel offset so the argmax
varies). Prints the peak RSS growth over the input, in MiB, and the labels' agreement.

    python3 benchmarks/window_memory.py [--classes 14] [--overlap 0.25] [--shape 255,223,276]
"""
import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys
import torch
args = json.loads(sys.argv[1])
torch.set_num_threads(args["threads"])
x = torch.rand([1, 1, *args["shape"]], generator=torch.Generator().manual_seed(0))
k = args["classes"]
offset = torch.linspace(0, 0.5, k).reshape(1, k, 1, 1, 1)
def predictor(t):
    return t.expand(-1, k, -1, -1, -1) + offset  # one (B, K, roi) tensor per batch
roi, sw, ov = [96, 96, 96], 4, args["overlap"]
if args["who"] == "monai":
    from monai.inferers import sliding_window_inference
    kw = {}
else:
    from voxaug.inferers import sliding_window_inference
    kw = {"argmax": True, "output_dtype": torch.uint8}
with torch.no_grad():  # a warm-up on a small image: libraries loaded before the baseline
    sliding_window_inference(x[..., :8, :8, :8], [4, 4, 4], sw, predictor, overlap=ov, **kw)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with torch.no_grad():
    labels = sliding_window_inference(x, roi, sw, predictor, overlap=ov, **kw)
    if args["who"] == "monai":
        labels = labels.argmax(1, keepdim=True)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"mib": (peak - base) / 1024, "hist": torch.bincount(labels.flatten().long(), minlength=k).tolist()}))
"""


def run(who: str, a: argparse.Namespace) -> dict:
    args = {"who": who, "classes": a.classes, "overlap": a.overlap, "threads": a.threads,
            "shape": [int(v) for v in a.shape.split(",")]}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--classes", type=int, default=14)
    ap.add_argument("--overlap", type=float, default=0.25)
    ap.add_argument("--shape", default="255,223,276")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    from bench_timing import print_header

    print_header()
    d, h, w = (int(v) for v in a.shape.split(","))
    print(f"case     1x1x{d}x{h}x{w} float32, roi 96^3, sw_batch_size 4, overlap {a.overlap}, {a.classes} classes\n")
    m, v = run("monai", a), run("voxaug", a)
    print(f"{'':8} {'peak RSS growth MiB':>20}")
    print(f"{'MONAI':8} {m['mib']:>20.0f}   (probabilities, then argmax)")
    print(f"{'voxaug':8} {v['mib']:>20.0f}   (argmax=True, uint8)")
    print(f"ratio    {m['mib'] / v['mib']:.2f}x less; label histograms equal: {m['hist'] == v['hist']}")


if __name__ == "__main__":
    main()
