"""The resample kernel's exact path (signed permutations with integer offsets) on its own: an
identity and a flip of d on ch2's size (1x1x181x217x181 float32: 724-byte rows), the identity of
the same volume in Fortran order (nibabel's layout), a flip of 4x1x96^3 and of 1x1x224x224x160
(rows of whole cache lines), torch's clone / .contiguous() beside them; and TorchIO's
ToCanonical on the real ch2 volume (RAS already) against TorchIO's own when it is installed.
Prints the median ms of each. Compare builds with VOXAUG_LIBRARY=/path/to/libvoxaug_torch.so.

    python3 benchmarks/exact_copy.py [--threads 2] [--repeats 15]
"""

import torch

from voxaug import ops

from bench_timing import median_ms, parse, parser, print_header

TEMPLATE = "/usr/share/mricron/templates/ch2.nii.gz"


def main() -> None:
    ap = parser(__doc__, 15)
    a = parse(ap)
    print_header()
    print(f"timing   median of {a.repeats} calls after one warm-up\n")
    g = torch.Generator().manual_seed(0)
    rows = []

    def maps(n: int, size: tuple) -> tuple:
        eye = torch.eye(3, 4, dtype=torch.float64).expand(n, 3, 4).contiguous()
        flip = eye.clone()
        flip[:, 0, 0], flip[:, 0, 3] = -1, size[0] - 1
        return eye, flip

    x = torch.rand((1, 1, 181, 217, 181), generator=g)
    xf = x.permute(0, 1, 4, 3, 2).contiguous().permute(0, 1, 4, 3, 2)
    eye, flip = maps(1, x.shape[2:])
    size = list(x.shape[2:])
    rows.append(("identity 1x1x181x217x181", median_ms(lambda i: ops.resample([x], eye, size, [0], [0]), a.repeats)))
    rows.append(("flip d, same", median_ms(lambda i: ops.resample([x], flip, size, [0], [0]), a.repeats)))
    rows.append(("torch clone, same", median_ms(lambda i: x.clone(), a.repeats)))
    rows.append(("identity, Fortran order", median_ms(lambda i: ops.resample([xf], eye, size, [0], [0]), a.repeats)))
    rows.append(("torch .contiguous() of it", median_ms(lambda i: xf.contiguous(), a.repeats)))
    for shape in ((4, 1, 96, 96, 96), (1, 1, 224, 224, 160)):
        y = torch.rand(shape, generator=g)
        _, fl = maps(shape[0], shape[2:])
        rows.append((f"flip d {'x'.join(map(str, shape))}",
                     median_ms(lambda i: ops.resample([y], fl, list(shape[2:]), [0], [0]), a.repeats)))
    try:
        import nibabel as nib
        import numpy as np
        from monai.data import MetaTensor

        from voxaug.torchio import ToCanonical

        img = nib.load(TEMPLATE)
        vol = torch.from_numpy(np.asarray(img.dataobj).astype(np.float32))[None]  # nibabel's order
        mt = MetaTensor(vol, affine=torch.as_tensor(img.affine))
        rows.append(("voxaug ToCanonical, ch2", median_ms(lambda i: ToCanonical()(mt), a.repeats)))
        try:
            import torchio as tio

            s = tio.Subject(t1=tio.ScalarImage(tensor=vol, affine=img.affine))
            rows.append(("TorchIO ToCanonical, ch2", median_ms(lambda i: tio.ToCanonical()(s), a.repeats)))
        except ImportError:
            pass
    except (ImportError, FileNotFoundError) as e:
        print(f"(ToCanonical rows skipped: {e})")
    w = max(len(r[0]) for r in rows)
    for name, ms in rows:
        print(f"{name:<{w}}  {ms:8.2f} ms")


if __name__ == "__main__":
    main()
