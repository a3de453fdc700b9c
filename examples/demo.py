#!/usr/bin/env python3
"""voxaug demo: every intensity transform, batched, on a real T1 MRI with its label atlas.

Loads the Colin27 T1 (ch2.nii.gz, uint8, 181x217x181) and the AAL atlas (aal.nii.gz) from
Debian's ``mricron-data``, stacks ``--batch`` copies into one (N, 1, D, H, W) tensor on the
device, runs each voxaug transform on the whole batch in one call and the fused Compose chain,
then writes:

  <out>/montage.png     axial / coronal / sagittal mid-slices: original vs fused-chain samples,
                        AAL region boundaries drawn as coloured edges
  <out>/transforms.png  axial mid-slice of two samples after each transform alone
  <out>/timings.json    the timing table below, machine-readable

and prints a timing table (ms per batch, voxels/s; median of ``--repeats`` after a warm-up).

    python3 examples/demo.py [--out out/demo] [--device auto|cpu|cuda] [--batch 8] [--repeats 3]

No plotting library is needed: the PNGs are written with numpy + zlib.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import struct
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import torch

try:
    import voxaug
except ImportError:  # running from a checkout without the editable install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import voxaug
from voxaug import crop as C
from voxaug import deform as D
from voxaug import degrade as Dg
from voxaug import filter as Fl
from voxaug import kspace as Ks
from voxaug import labels as Lb
from voxaug import post as Po
from voxaug import smooth_field as Sf
from voxaug import stats as St
from voxaug import transforms as T

TEMPLATES = Path("/usr/share/mricron/templates")


# ---------------------------------------------------------------- data
def load_volumes(image_path: Path, label_path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        import nibabel as nib
    except ImportError:
        sys.exit("demo: nibabel is needed to read NIfTI (pip install nibabel)")
    for p in (image_path, label_path):
        if not p.is_file():
            sys.exit(f"demo: {p} not found; install Debian's mricron-data (apt-get install mricron-data) "
                     "or pass --image / --label")
    img = nib.load(str(image_path))
    lab = nib.load(str(label_path))
    image = np.asanyarray(img.dataobj)
    label = np.asanyarray(lab.dataobj)
    if image.shape != label.shape:
        sys.exit(f"demo: image {image.shape} and label {label.shape} are not on the same grid")
    # Both files are RAS (+x right, +y anterior, +z superior); axes kept as stored: (x, y, z).
    return image, label


# ---------------------------------------------------------------- timing
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn, device: torch.device, repeats: int, warmup: int = 1, keep=None):
    """Median wall time in ms of ``fn()`` (device work included) over `repeats` calls after
    `warmup` calls, and ``keep(output)`` of the first call (to reuse its result)."""
    kept = None
    for i in range(warmup):
        out = fn()
        if i == 0 and keep is not None:
            kept = keep(out)
        del out
    sync(device)
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), kept


# ---------------------------------------------------------------- PNG (numpy + zlib only)
def write_png(path: Path, rgb: np.ndarray) -> None:
    """Writes an (H, W, 3) uint8 array as an 8-bit RGB PNG."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w, _ = rgb.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rgb.reshape(h, w * 3)], axis=1).tobytes()  # filter 0

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    path.write_bytes(png)


# A 5x7 bitmap font for the captions (upper case, digits, a few signs).
_FONT_ROWS = {
    "A": ".###.,#...#,#...#,#####,#...#,#...#,#...#", "B": "####.,#...#,#...#,####.,#...#,#...#,####.",
    "C": ".###.,#...#,#....,#....,#....,#...#,.###.", "D": "####.,#...#,#...#,#...#,#...#,#...#,####.",
    "E": "#####,#....,#....,####.,#....,#....,#####", "F": "#####,#....,#....,####.,#....,#....,#....",
    "G": ".###.,#...#,#....,#.###,#...#,#...#,.####", "H": "#...#,#...#,#...#,#####,#...#,#...#,#...#",
    "I": ".###.,..#..,..#..,..#..,..#..,..#..,.###.", "J": "..###,...#.,...#.,...#.,...#.,#..#.,.##..",
    "K": "#...#,#..#.,#.#..,##...,#.#..,#..#.,#...#", "L": "#....,#....,#....,#....,#....,#....,#####",
    "M": "#...#,##.##,#.#.#,#.#.#,#...#,#...#,#...#", "N": "#...#,#...#,##..#,#.#.#,#..##,#...#,#...#",
    "O": ".###.,#...#,#...#,#...#,#...#,#...#,.###.", "P": "####.,#...#,#...#,####.,#....,#....,#....",
    "Q": ".###.,#...#,#...#,#...#,#.#.#,#..#.,.##.#", "R": "####.,#...#,#...#,####.,#.#..,#..#.,#...#",
    "S": ".####,#....,#....,.###.,....#,....#,####.", "T": "#####,..#..,..#..,..#..,..#..,..#..,..#..",
    "U": "#...#,#...#,#...#,#...#,#...#,#...#,.###.", "V": "#...#,#...#,#...#,#...#,#...#,.#.#.,..#..",
    "W": "#...#,#...#,#...#,#.#.#,#.#.#,#.#.#,.#.#.", "X": "#...#,#...#,.#.#.,..#..,.#.#.,#...#,#...#",
    "Y": "#...#,#...#,.#.#.,..#..,..#..,..#..,..#..", "Z": "#####,....#,...#.,..#..,.#...,#....,#####",
    "0": ".###.,#...#,#..##,#.#.#,##..#,#...#,.###.", "1": "..#..,.##..,..#..,..#..,..#..,..#..,.###.",
    "2": ".###.,#...#,....#,...#.,..#..,.#...,#####", "3": "#####,...#.,..#..,...#.,....#,#...#,.###.",
    "4": "...#.,..##.,.#.#.,#..#.,#####,...#.,...#.", "5": "#####,#....,####.,....#,....#,#...#,.###.",
    "6": "..##.,.#...,#....,####.,#...#,#...#,.###.", "7": "#####,....#,...#.,..#..,.#...,.#...,.#...",
    "8": ".###.,#...#,#...#,.###.,#...#,#...#,.###.", "9": ".###.,#...#,#...#,.####,....#,...#.,.##..",
    " ": ".....,.....,.....,.....,.....,.....,.....", "-": ".....,.....,.....,#####,.....,.....,.....",
    ".": ".....,.....,.....,.....,.....,.##..,.##..", ",": ".....,.....,.....,.....,.##..,..#..,.#...",
    ":": ".....,.##..,.##..,.....,.##..,.##..,.....", "=": ".....,.....,#####,.....,#####,.....,.....",
    ">": ".#...,..#..,...#.,....#,...#.,..#..,.#...", "(": "...#.,..#..,.#...,.#...,.#...,..#..,...#.",
    ")": ".#...,..#..,...#.,...#.,...#.,..#..,.#...", "/": ".....,....#,...#.,..#..,.#...,#....,.....",
    "+": ".....,..#..,..#..,#####,..#..,..#..,.....", "_": ".....,.....,.....,.....,.....,.....,#####",
    ";": ".....,.##..,.##..,.....,.##..,..#..,.#...",
}
_FONT = {ch: np.array([[c == "#" for c in row] for row in rows.split(",")]) for ch, rows in _FONT_ROWS.items()}


def draw_text(canvas: np.ndarray, text: str, y: int, x: int, scale: int = 2,
              color: tuple[int, int, int] = (235, 235, 235)) -> None:
    for i, ch in enumerate(text.upper()):
        glyph = _FONT.get(ch, _FONT[" "])
        g = np.kron(glyph, np.ones((scale, scale), bool))
        x0 = x + i * 6 * scale
        ys, xs = slice(y, y + g.shape[0]), slice(x0, x0 + g.shape[1])
        region = canvas[ys, xs]
        if region.shape[:2] != g.shape:
            return  # text runs off the canvas: stop there
        region[g] = color


def text_width(text: str, scale: int = 2) -> int:
    return len(text) * 6 * scale


# ---------------------------------------------------------------- slices and overlay
def mid_slices(vol: np.ndarray) -> dict[str, np.ndarray]:
    """Mid-slices of an (x, y, z) RAS volume, oriented for display (superior / anterior up)."""
    cx, cy, cz = (s // 2 for s in vol.shape)
    return {
        "axial": np.flipud(vol[:, :, cz].T),     # rows: y (anterior up), cols: x (right to the right)
        "coronal": np.flipud(vol[:, cy, :].T),   # rows: z (superior up), cols: x
        "sagittal": np.flipud(vol[cx, :, :].T),  # rows: z (superior up), cols: y (anterior to the right)
    }


def label_colors(n: int) -> np.ndarray:
    """Distinct saturated colours for labels 0..n-1 (golden-ratio hue steps)."""
    h = (np.arange(n) * 0.618033988749895) % 1.0
    s, v = 0.85, 1.0
    i = np.floor(h * 6).astype(int) % 6
    f = h * 6 - np.floor(h * 6)
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    table = np.stack([
        np.choose(i, [v, q, p, p, t, v]), np.choose(i, [t, v, v, q, p, p]), np.choose(i, [p, p, t, v, v, q])], -1)
    return (table * 255).astype(np.uint8)


def render_panel(gray: np.ndarray, label: np.ndarray, colors: np.ndarray, window: tuple[float, float],
                 zoom: int) -> np.ndarray:
    """Grey image in `window`, upscaled by `zoom`, with 1-pixel coloured label boundaries."""
    lo, hi = window
    g = np.clip((gray.astype(np.float32) - lo) / (hi - lo), 0.0, 1.0)
    g = np.kron(g, np.ones((zoom, zoom), np.float32))
    lab = np.kron(label.astype(np.int32), np.ones((zoom, zoom), np.int32))
    rgb = np.repeat((g * 255).astype(np.uint8)[..., None], 3, axis=-1)
    # A pixel is on a boundary when its right or lower neighbour has another label; it takes the
    # colour of the non-background label of the pair.
    edge_lab = np.zeros_like(lab)
    dx = lab[:, :-1] != lab[:, 1:]
    edge_lab[:, :-1][dx] = np.maximum(lab[:, :-1], lab[:, 1:])[dx]
    dy = lab[:-1, :] != lab[1:, :]
    edge_lab[:-1, :][dy] = np.maximum(edge_lab[:-1, :], np.maximum(lab[:-1, :], lab[1:, :]))[dy]
    on = edge_lab > 0
    alpha = 0.75
    rgb[on] = (alpha * colors[edge_lab[on] % len(colors)] + (1 - alpha) * rgb[on]).astype(np.uint8)
    return rgb


def montage(columns: list[tuple[str, dict[str, np.ndarray]]], rows: list[str], labels,
            window: tuple[float, float], title: list[str], zoom: int = 2) -> np.ndarray:
    """Grid: one row per view in `rows`, one column per (caption, slices) entry. `labels` is one
    {view: slice} dict for every column, or a list with one such dict per column."""
    colors = label_colors(256)
    cell = max(max(s.shape) for _, sl in columns for s in sl.values()) * zoom
    cell = max(cell, max(text_width(caption) for caption, _ in columns) + 8)
    pad, left, top_caption = 8, text_width("SAGITTAL ") + 16, 30
    top = pad + 22 * len(title) + top_caption
    h = top + len(rows) * (cell + pad) + pad
    w = left + len(columns) * (cell + pad) + pad
    canvas = np.full((h, w, 3), 24, np.uint8)
    for k, line in enumerate(title):
        draw_text(canvas, line, pad + 22 * k, pad, color=(255, 255, 255) if k == 0 else (190, 190, 190))
    for c, (caption, _) in enumerate(columns):
        x0 = left + c * (cell + pad)
        draw_text(canvas, caption, top - top_caption + 6, x0 + max(0, (cell - text_width(caption)) // 2))
    for r, view in enumerate(rows):
        y0 = top + r * (cell + pad)
        draw_text(canvas, view, y0 + cell // 2 - 7, pad)
        for c, (_, slices) in enumerate(columns):
            lab = labels[c] if isinstance(labels, list) else labels
            panel = render_panel(slices[view], lab[view], colors, window, zoom)
            x0 = left + c * (cell + pad)
            oy, ox = (cell - panel.shape[0]) // 2, (cell - panel.shape[1]) // 2
            canvas[y0 + oy:y0 + oy + panel.shape[0], x0 + ox:x0 + ox + panel.shape[1]] = panel
    return canvas


# ---------------------------------------------------------------- main
def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        sys.exit("demo: --device cuda asked for, but torch.cuda.is_available() is False")
    return torch.device(name)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.processor())
    except OSError:
        model = platform.processor() or "cpu"
    return f"{model}, {torch.get_num_threads()} threads"


def fused_chain(a_min: float, a_max: float, seed: int) -> T.Compose:
    return T.Compose([
        T.ScaleIntensityRange(a_min=a_min, a_max=a_max, b_min=0.0, b_max=1.0, clip=True),
        T.RandScaleIntensity(factors=0.2, prob=1.0),
        T.RandShiftIntensity(offsets=0.1, prob=1.0),
        T.RandGaussianNoise(prob=1.0, mean=0.0, std=0.1),
    ]).set_random_state(seed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("out/demo"), help="output folder (default ./out/demo)")
    ap.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    ap.add_argument("--batch", type=int, default=8, help="copies of the volume in the batch (default 8)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repetitions after one warm-up (default 3)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random transforms (default 0)")
    ap.add_argument("--image", type=Path, default=TEMPLATES / "ch2.nii.gz")
    ap.add_argument("--label", type=Path, default=TEMPLATES / "aal.nii.gz")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.repeats < 1:
        ap.error("--batch and --repeats must be >= 1")

    device = pick_device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()

    image, label = load_volumes(args.image, args.label)
    p_lo, p_hi = (float(v) for v in np.percentile(image, [0.5, 99.5]))
    print(f"voxaug {voxaug.__version__} (torch {torch.__version__}), ops library {voxaug.library_path}")
    print(f"device: {device} ({device_name(device)})")
    print(f"image {args.image.name}: {image.shape} {image.dtype}, range {image.min()}..{image.max()}, "
          f"p0.5={p_lo:g} p99.5={p_hi:g}; label {args.label.name}: {int(label.max())} regions")

    # (N, 1, D, H, W) batch of copies; uint8 on the device, ScaleIntensityRange makes it float32.
    vol = torch.from_numpy(np.ascontiguousarray(image))
    batch_u8 = vol.to(device).expand(args.batch, 1, *vol.shape).contiguous()
    a_min, a_max = p_lo, p_hi
    sir = T.ScaleIntensityRange(a_min=a_min, a_max=a_max, b_min=0.0, b_max=1.0, clip=True)
    batch = sir(batch_u8)  # float32 in [0, 1]: the input of the other transforms
    nvox = batch.numel()

    seed = args.seed
    single = [
        ("ScaleIntensityRange", batch_u8, sir),
        ("ShiftIntensity", batch, T.ShiftIntensity(offset=0.1)),
        ("ScaleIntensity min-max", batch_u8, T.ScaleIntensity(minv=0.0, maxv=1.0)),
        ("ScaleIntensity factor", batch, T.ScaleIntensity(minv=None, maxv=None, factor=0.2)),
        ("RandShiftIntensity", batch, T.RandShiftIntensity(offsets=0.1, prob=1.0, seed=seed + 1)),
        ("RandScaleIntensity", batch, T.RandScaleIntensity(factors=0.2, prob=1.0, seed=seed + 2)),
        ("RandGaussianNoise", batch, T.RandGaussianNoise(prob=1.0, std=0.1, seed=seed + 3)),
        ("RandRicianNoise", batch, T.RandRicianNoise(prob=1.0, std=0.1, seed=seed + 4)),
        ("RandBiasField", batch, T.RandBiasField(coeff_range=(0.2, 0.3), prob=1.0, seed=seed + 5)),
        ("RandAdjustContrast", batch, T.RandAdjustContrast(prob=1.0, gamma=(0.5, 2.0), seed=seed + 6)),
        ("GaussianSmooth", batch, Fl.GaussianSmooth(sigma=1.5)),
        ("NormalizeIntensity nonzero", batch, St.NormalizeIntensity(nonzero=True)),
        ("ScaleIntensityRangePercent.", batch_u8, St.ScaleIntensityRangePercentiles(1, 99, 0.0, 1.0, clip=True)),
        ("TorchIO RandomNoise", batch, T.RandomNoise(std=(0.05, 0.1), seed=seed + 7)),
        ("TorchIO RandomBlur", batch, Fl.RandomBlur(std=(1, 2), seed=seed + 8)),
        ("TorchIO RandomBiasField", batch, T.RandomBiasField(coefficients=0.3, seed=seed + 9)),
        ("TorchIO RandomGamma", batch, T.RandomGamma(log_gamma=0.3, seed=seed + 10)),
        ("TorchIO ZNormalization", batch_u8, St.ZNormalization()),
        ("TorchIO RescaleIntensity", batch_u8, St.RescaleIntensity(percentiles=(1, 99))),
        ("RandGibbsNoise", batch, Dg.RandGibbsNoise(prob=1.0, alpha=(0.4, 0.6), seed=seed + 31)),
        ("TorchIO RandomGhosting", batch, Ks.RandomGhosting(intensity=(0.6, 0.9), seed=seed + 32)),
        ("TorchIO RandomSpike", batch, Ks.RandomSpike(intensity=(0.05, 0.1), seed=seed + 33)),
        ("TorchIO RandomMotion", batch, Ks.RandomMotion(degrees=4, translation=4, seed=seed + 36)),
        ("TorchIO RandomAnisotropy", batch, Dg.RandomAnisotropy(downsampling=(3, 5), seed=seed + 35)),
        ("RandSmoothFieldAdjustContrast", batch, Sf.RandSmoothFieldAdjustContrast(
            tuple(batch.shape[2:]), (6, 6, 6), mode="trilinear", prob=1.0, gamma=(0.6, 1.6), seed=seed + 37)),
        ("RandSmoothFieldAdjustIntensity", batch, Sf.RandSmoothFieldAdjustIntensity(
            tuple(batch.shape[2:]), (6, 6, 6), mode="trilinear", prob=1.0, gamma=(0.6, 1.0), seed=seed + 38)),
        ("RandSmoothDeform", batch, Sf.RandSmoothDeform(tuple(batch.shape[2:]), (6, 6, 6), field_mode="trilinear",
                                                        prob=1.0, def_range=0.05, grid_mode="bilinear",
                                                        seed=seed + 39)),
        ("RandKSpaceSpikeNoise", batch, Ks.RandKSpaceSpikeNoise(prob=1.0, intensity_range=(11.0, 12.0),
                                                                 seed=seed + 34)),
        ("RandCoarseShuffle", batch, Dg.RandCoarseShuffle(holes=6, spatial_size=12, max_spatial_size=32, prob=1.0,
                                                          seed=seed + 40)),
        ("TorchIO RandomSwap", batch, Dg.RandomSwap(patch_size=15, num_iterations=100, seed=seed + 41)),
        ("MedianSmooth r=1", batch, Fl.MedianSmooth(1)),
        ("HistogramNormalize", batch, St.HistogramNormalize(num_bins=256, max=1)),
    ]
    chain = fused_chain(a_min, a_max, seed)
    unfused = fused_chain(a_min, a_max, seed).transforms  # the same steps, one call (one pass) each

    def run_unfused(x=batch_u8):
        for t in unfused:
            x = t(x)
        return x

    # ---- correctness checks (cheap, and they guard the pictures below) ----
    fused_out = chain(batch_u8)
    reference = run_unfused()
    fused_vs_steps = (fused_out - reference).abs().max().item()
    one = fused_chain(a_min, a_max, seed)(vol.unsqueeze(0))  # sample 0 alone, on the CPU
    twin = (fused_out[0].cpu() - one).abs().max().item()
    del reference
    if not torch.isfinite(fused_out).all():
        sys.exit("demo: the fused chain produced NaN or inf")
    print(f"check: fused Compose vs the same transforms one by one: max |diff| = {fused_vs_steps:.3g}")
    print(f"check: sample 0 of the {device.type} batch vs the CPU single-volume call: max |diff| = {twin:.3g}")
    if max(fused_vs_steps, twin) > 1e-4:  # values are O(1); only rounding may differ
        sys.exit("demo: a check failed (see above): the pictures would not show what they claim")

    # ---- timing; the warm-up call of each transform also gives its picture ----
    show = list(range(min(args.batch, 2)))
    cz = image.shape[2] // 2

    def axial(out: torch.Tensor) -> np.ndarray:
        return out[show, 0, :, :, cz].cpu().numpy()

    table, pictures = [], []
    for name, x, t in single + [("Compose (4 steps, fused)", batch_u8, chain)]:
        ms, pic = time_call(lambda: t(x), device, args.repeats, keep=axial)
        # The montage's draw of the chain, not the warm-up's, so the two PNGs agree.
        pictures.append(("COMPOSE", axial(fused_out)) if t is chain else (name, pic))
        table.append({"transform": name, "device": device.type, "batch": args.batch,
                      "shape": list(x.shape), "in_dtype": str(x.dtype).replace("torch.", ""),
                      "ms_per_batch": ms, "voxels_per_s": nvox / (ms * 1e-3)})
    ms, _ = time_call(run_unfused, device, args.repeats)
    table.append({"transform": "same 4 steps, unfused", "device": device.type, "batch": args.batch,
                  "shape": list(batch_u8.shape), "in_dtype": "uint8",
                  "ms_per_batch": ms, "voxels_per_s": nvox / (ms * 1e-3)})

    # ---- spatial: image and atlas labels move together, one launch for the whole batch ----
    lab_vol = torch.from_numpy(np.ascontiguousarray(label))
    lab_batch = lab_vol.to(device).expand(args.batch, 1, *lab_vol.shape).contiguous()
    affine_d = T.RandAffined(keys=["image", "label"], prob=1.0, rotate_range=(0.3, 0.3, 0.3),
                             scale_range=(0.15, 0.15, 0.15), translate_range=(8, 8, 8),
                             mode=("bilinear", "nearest"), padding_mode="zeros", seed=seed + 10)
    spatial_cases = [
        ("RandAffined img+label", lambda: affine_d({"image": fused_out, "label": lab_batch})),
        ("RandFlip", lambda t=T.RandFlip(prob=0.5, spatial_axis=0, seed=seed + 11): t(fused_out)),
        ("RandRotate90", lambda t=T.RandRotate90(prob=1.0, spatial_axes=(0, 2), seed=seed + 12): t(fused_out)),
        ("Rand3DElasticd img+label", lambda t=D.Rand3DElasticd(
            ["image", "label"], (5, 8), (100, 200), prob=1.0, rotate_range=0.1, mode=("bilinear", "nearest"),
            padding_mode="zeros", seed=seed + 13): t({"image": fused_out, "label": lab_batch})),
        ("RandGridDistortion", lambda t=D.RandGridDistortion(5, prob=1.0, distort_limit=0.1, seed=seed + 14):
            t(fused_out)),
        ("RandCropByPosNeg 4x96^3", lambda t=C.RandCropByPosNegLabeld(
            ["image", "label"], "label", (96, 96, 96), num_samples=4, seed=seed + 15):
            t({"image": fused_out, "label": lab_batch})),
        # Label post-processing on the atlas batch (connected components per sample and label).
        ("KeepLargestCC 3 AAL labels", lambda t=Po.KeepLargestConnectedComponent(
            applied_labels=[int(v) for v in np.unique(label)[1:4]]): t(lab_batch)),
        ("RemoveSmallObjects AAL", lambda t=Po.RemoveSmallObjects(min_size=64): t(lab_batch)),
        ("DistanceTransformEDT AAL", lambda t=Po.DistanceTransformEDT(): t(lab_batch)),
        ("RandomLabelsToImage AAL", lambda t=Lb.RandomLabelsToImage(num_labels=int(label.max()) + 1, seed=seed + 16):
            t(lab_batch)),
    ]
    for name, fn in spatial_cases:
        ms, _ = time_call(fn, device, args.repeats)
        table.append({"transform": name, "device": device.type, "batch": args.batch,
                      "shape": list(fused_out.shape), "in_dtype": "float32",
                      "ms_per_batch": ms, "voxels_per_s": nvox / (ms * 1e-3)})
    moved = affine_d({"image": fused_out, "label": lab_batch})
    new_labels = set(torch.unique(moved["label"]).cpu().tolist())
    if not new_labels <= set(np.unique(label).tolist()):
        sys.exit("demo: RandAffined invented label values: nearest resampling is broken")
    print("check: RandAffined labels are a subset of the atlas labels (nearest keeps labels labels)")

    print(f"\ntiming: batch {tuple(batch_u8.shape)} = {nvox / 1e6:.1f} Mvoxel, median of {args.repeats} "
          f"after 1 warm-up, ms per batch (whole batch in one call)")
    head = f"{'transform':<26} {'device':<6} {'batch':>5} {'in':>7} {'ms/batch':>10} {'Gvoxel/s':>9}"
    print(head)
    print("-" * len(head))
    for row in table:
        print(f"{row['transform']:<26} {row['device']:<6} {row['batch']:>5} {row['in_dtype']:>7} "
              f"{row['ms_per_batch']:>10.1f} {row['voxels_per_s'] / 1e9:>9.3f}")

    # ---- sliding-window inference: a small conv net (random weights) over the whole volume ----
    from voxaug.inferers import sliding_window_inference

    vol = torch.from_numpy((image.astype(np.float32) - a_min) / (a_max - a_min))[None, None].to(device)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv3d(8, 3, 1)).to(device).eval()
    with torch.no_grad():
        sw_ms, seg = time_call(lambda: sliding_window_inference(vol, (96, 96, 96), 4, net, overlap=0.25,
                                                                mode="gaussian"),
                               device, args.repeats, keep=lambda o: o)
        try:
            from monai.inferers import sliding_window_inference as monai_swi
            sw_diff = (monai_swi(vol, (96, 96, 96), 4, net, overlap=0.25, mode="gaussian") - seg).abs().max().item()
            print(f"check: sliding_window_inference vs MONAI's on {tuple(vol.shape)}: max |diff| = {sw_diff:.3g}")
        except ImportError:
            print("check: MONAI not installed, sliding-window comparison skipped")
    table.append({"transform": "sliding window (conv net)", "device": device.type, "batch": 1,
                  "in_dtype": "float32", "ms_per_batch": sw_ms, "voxels_per_s": vol.numel() / (sw_ms / 1e3)})
    print(f"sliding-window inference, roi 96^3, overlap 0.25, Gaussian, sw_batch_size 4: {sw_ms:.0f} ms "
          f"(network included), output {tuple(seg.shape)}")

    # ---- pictures ----
    n_show = min(args.batch, 4)
    host_out = fused_out[:n_show, 0].cpu().numpy()
    labels = mid_slices(label)
    views = ["axial", "coronal", "sagittal"]
    original = (image.astype(np.float32) - a_min) / (a_max - a_min)  # the same window as ScaleIntensityRange
    columns = [("ORIGINAL", mid_slices(original))]
    for k in range(n_show):
        inside = host_out[k][label > 0]
        columns.append((f"SAMPLE {k} MEAN {inside.mean():.2f}", mid_slices(host_out[k])))
    window = (0.0, 1.0)
    title = [f"VOXAUG FUSED CHAIN ON {args.image.name} ({device.type.upper()}, BATCH {args.batch}, SEED {seed})",
             f"SCALEINTENSITYRANGE({a_min:g}..{a_max:g} > 0..1, CLIP) > RANDSCALEINTENSITY(0.2) > "
             f"RANDSHIFTINTENSITY(0.1) > RANDGAUSSIANNOISE(STD 0.1)",
             f"DISPLAY WINDOW 0..1. EDGES: AAL REGIONS. MEAN: INSIDE THE ATLAS. RAS: R AT RIGHT, A/S UP"]
    montage_path = args.out / "montage.png"
    write_png(montage_path, montage(columns, views, labels, window, title))

    # Spatial: each sample with its own moved atlas, so alignment shows.
    img_host = moved["image"][:n_show, 0].cpu().numpy()
    lab_host = moved["label"][:n_show, 0].cpu().numpy()
    spatial_cols = [("FUSED CHAIN, SAMPLE 0", mid_slices(host_out[0]))]
    spatial_labels = [labels]
    for k in range(n_show):
        spatial_cols.append((f"RANDAFFINED {k}", mid_slices(img_host[k])))
        spatial_labels.append(mid_slices(lab_host[k]))
    spatial_path = args.out / "spatial.png"
    write_png(spatial_path, montage(
        spatial_cols, views, spatial_labels, window,
        [f"VOXAUG RANDAFFINED ON IMAGE + AAL LABELS ({device.type.upper()}, BATCH {args.batch}, SEED {seed + 10})",
         "ROTATE +-0.3 RAD, SCALE +-0.15, TRANSLATE +-8 VOXELS PER SAMPLE; IMAGE BILINEAR, LABELS NEAREST, "
         "ONE LAUNCH",
         "EDGES: EACH SAMPLE'S OWN RESAMPLED ATLAS (THEY MUST FOLLOW THE ANATOMY)"]))

    # Each transform alone: axial mid-slice of samples 0 and 1 (two draws of each random one).
    cols = [(name, {f"SAMPLE {k}": np.flipud(pic[k].T) for k in show}) for name, pic in pictures]
    lab_ax = {f"SAMPLE {k}": labels["axial"] for k in show}
    transforms_path = args.out / "transforms.png"
    write_png(transforms_path, montage(
        cols, [f"SAMPLE {k}" for k in show], lab_ax, (-0.2, 1.3),
        [f"EACH VOXAUG TRANSFORM ALONE, AXIAL MID-SLICE ({device.type.upper()}, SEED {seed})",
         "INPUT: THE RAW UINT8 VOLUME FOR SCALEINTENSITYRANGE, MIN-MAX AND COMPOSE; THE SCALEINTENSITYRANGE "
         "OUTPUT (0..1) FOR THE OTHERS. DISPLAY WINDOW -0.2..1.3"], zoom=1))

    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([sys.executable, *sys.argv]), "device": device_name(device),
            "torch": torch.__version__, "voxaug": voxaug.__version__, "repeats": args.repeats,
            "checks": {"fused_vs_steps_max_abs": fused_vs_steps, "sample0_vs_cpu_single_max_abs": twin}}
    (args.out / "timings.json").write_text(json.dumps({"meta": meta, "timings": table}, indent=2) + "\n")
    print(f"\nwrote {montage_path}\nwrote {spatial_path}\nwrote {transforms_path}\n"
          f"wrote {args.out / 'timings.json'}")
    print(f"total {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
