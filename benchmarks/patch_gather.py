"""The exact patch gather on the CPU (issue 8's BTCV batch), next to torch's own copy of the same
crops, in one process: 4 x 96^3 patches of a float32 image + uint8 label from 192x192x128 volumes
(eight of them, so the reads come from memory rather than the caches), identity maps (the exact
path), with and without a RandShiftIntensity-like post step, and the whole BTCV chain through
voxaug.transforms.Compose (RandCropByPosNegLabeld as_batch -> RandFlipd x3 -> RandRotate90d ->
RandShiftIntensityd) and variants with every patch turned or flipped. Prints the median ms per call.

    python3 benchmarks/patch_gather.py [--threads 2] [--repeats 200]
"""

import torch

from voxaug import crop as vc
from voxaug import ops as O
from voxaug import spatial as vs
from voxaug import transforms as vt

from bench_timing import median_ms, parse, parser, print_header


def main() -> None:
    ap = parser(__doc__, 200)
    a = parse(ap)
    g = torch.Generator().manual_seed(0)
    vols = [torch.rand(1, 1, 192, 192, 128, generator=g) for _ in range(8)]
    labs = [(torch.rand(1, 1, 192, 192, 128, generator=g) * 5).to(torch.uint8) for _ in range(8)]
    mats = torch.zeros(4, 3, 4, dtype=torch.float64)
    mats[:, :, :3] = torch.eye(3, dtype=torch.float64)
    shift = [O.Step(O.SHIFT_INTENSITY, O.RANDOM, (0.0, -0.1, 0.1), prob=0.5, seed=1)]

    def starts():
        s = torch.randint(0, 96, (1, 4, 3), generator=g)
        s[..., 2] %= 32
        return s

    def gather(targets, post):
        modes, pads = ["nearest"] * len(targets), ["zeros"] * len(targets)
        extra = dict(post_input=0, post_steps=shift) if post else {}
        return lambda i: O.resample_patches([t[i % 8] for t in targets], mats, starts(), (96, 96, 96), modes, pads,
                                            **extra)

    def torch_copy(i):
        v, lab = vols[i % 8], labs[i % 8]
        s = starts()[0].tolist()
        out = torch.empty(4, 1, 96, 96, 96)
        lout = torch.empty(4, 1, 96, 96, 96, dtype=torch.uint8)
        for k, (z, y, x) in enumerate(s):
            out[k].copy_(v[0, :, z:z + 96, y:y + 96, x:x + 96])
            lout[k].copy_(lab[0, :, z:z + 96, y:y + 96, x:x + 96])

    keys = ["image", "label"]

    def chain(spatial):
        tr = vt.Compose([vc.RandCropByPosNegLabeld(keys, "label", [96, 96, 96], num_samples=4, as_batch=True),
                         *spatial, vt.RandShiftIntensityd("image", offsets=0.1, prob=0.5)]).set_random_state(0)
        return lambda i: tr({"image": vols[i % 8][0], "label": labs[i % 8][0]})

    btcv = [vs.RandFlipd(keys, prob=0.1, spatial_axis=0), vs.RandFlipd(keys, prob=0.1, spatial_axis=1),
            vs.RandFlipd(keys, prob=0.1, spatial_axis=2), vs.RandRotate90d(keys, prob=0.1, max_k=3)]
    cases = [
        ("torch copy_ of the crops (image + label)", torch_copy),
        ("resample_patches image + label", gather([vols, labs], False)),
        ("resample_patches image + label, shift as post step", gather([vols, labs], True)),
        ("resample_patches image", gather([vols], False)),
        ("resample_patches image, shift as post step", gather([vols], True)),
        ("resample_patches label", gather([labs], False)),
        ("Compose: BTCV chain", chain(btcv)),
        ("Compose: every patch a quarter turn", chain([vs.RandRotate90d(keys, prob=1.0, max_k=3)])),
        ("Compose: every patch flipped in w", chain([vs.RandFlipd(keys, prob=1.0, spatial_axis=2)])),
    ]
    print_header()
    print(f"timing   median of {a.repeats} calls after 5 warm-up calls, 4 x 96^3 patches of 192x192x128\n")
    for name, fn in cases:
        print(f"{name:55s} {median_ms(fn, a.repeats, warmup=5):8.3f} ms")


if __name__ == "__main__":
    main()
