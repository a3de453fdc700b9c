#!/usr/bin/env python3
"""TorchIO-style patch-based inference, voxaug vs TorchIO in one process: GridSampler (patch 64,
overlap 16) over ch2.nii.gz (181x217x181, mricron-data), batches of 4 through a network, then
GridAggregator in each overlap mode.
  torchio  tio.GridSampler -> torch DataLoader (batch 4, num_workers 0, as TorchIO's tutorial)
           -> network -> tio.GridAggregator.add_batch (moves each batch to the CPU, adds patch by
           patch) -> get_output_tensor()
  voxaug   voxaug.crop.GridSampler.batches(4) (one gather per batch) -> network ->
           voxaug.crop.GridAggregator.add_batch (one aggregate_patches_ per batch) ->
           get_output_tensor()
Networks: identity, and a 3x3x3 conv with 2 output channels. Reported per volume (median of
--repeats after one warm-up): total ms, ms inside the network, and the rest ("outside"), with
voxaug's speed-up on the outside time. Each run's output is checked against TorchIO's (equal
on the CPU).

    python3 benchmarks/compare_grid.py [--threads 2] [--repeats 5] [--device cpu|cuda]
"""
import statistics
import time

import torch

from bench_timing import Timed, parser, parse, print_header


def load():
    import nibabel as nib
    import numpy as np

    img = np.asarray(nib.load("/usr/share/mricron/templates/ch2.nii.gz").dataobj).astype("float32") / 255.0
    return torch.from_numpy(img)[None]


def run_torchio(img, net, mode):
    import torchio as tio

    subject = tio.Subject(img=tio.ScalarImage(tensor=img))
    sampler = tio.GridSampler(subject, 64, 16)
    agg = tio.GridAggregator(sampler, overlap_mode=mode)
    for batch in torch.utils.data.DataLoader(sampler, batch_size=4):
        agg.add_batch(net(batch["img"][tio.DATA].to(net.device)), batch[tio.LOCATION])
    return agg.get_output_tensor()


def run_voxaug(img, net, mode):
    from voxaug import crop as vc

    sampler = vc.GridSampler({"img": img}, 64, 16)
    agg = vc.GridAggregator(sampler, overlap_mode=mode)
    for batch in sampler.batches(4):
        agg.add_batch(net(batch["img"]), batch["location"])
    return agg.get_output_tensor()


def main() -> None:
    ap = parser(__doc__, 5)
    ap.add_argument("--device", default="cpu")
    args = parse(ap)
    device = torch.device(args.device)
    print_header()
    img = load()
    conv = torch.nn.Conv3d(1, 2, 3, padding=1).to(device)
    print(f"\n{'network':<9} {'mode':<8} {'TorchIO total / outside ms':>27} {'voxaug total / outside ms':>27} "
          f"{'outside speed-up':>17}")
    for net_name, inner in (("identity", torch.nn.Identity()), ("conv", conv)):
        for mode in ("crop", "average", "hann"):
            res = {}
            outs = {}
            for name, fn, x in (("torchio", run_torchio, img), ("voxaug", run_voxaug, img.to(device))):
                totals, outside = [], []
                for i in range(args.repeats + 1):
                    net = Timed(inner, device)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    t = time.perf_counter()
                    with torch.no_grad():
                        out = fn(x, net, mode)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    total = time.perf_counter() - t
                    if i:
                        totals.append(total)
                        outside.append(total - net.seconds)
                outs[name] = out
                res[name] = (statistics.median(totals) * 1e3, statistics.median(outside) * 1e3)
            if device.type == "cpu":
                assert torch.equal(outs["voxaug"], outs["torchio"]), (net_name, mode)
            else:
                torch.testing.assert_close(outs["voxaug"].cpu(), outs["torchio"].cpu(), rtol=1e-4, atol=1e-4)
            (tt, to), (vt, vo) = res["torchio"], res["voxaug"]
            print(f"{net_name:<9} {mode:<8} {tt:>14.1f} / {to:>10.1f} {vt:>14.1f} / {vo:>10.1f} {to / vo:>16.1f}x")


if __name__ == "__main__":
    main()
