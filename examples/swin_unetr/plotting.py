"""PNG figures of the Swin UNETR example: the training curve and validation slices.

No plotting library: the PNG writer, the 5x7 bitmap font, the label colours and the slice
montage are those of examples/demo.py (imported from it by path, so there is one copy).
"""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

_DEMO_PATH = Path(__file__).resolve().parents[1] / "demo.py"


def _demo():
    mod = sys.modules.get("voxaug_example_demo")
    if mod is None:
        spec = importlib.util.spec_from_file_location("voxaug_example_demo", _DEMO_PATH)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["voxaug_example_demo"] = mod
        spec.loader.exec_module(mod)
    return mod


def write_png(path: Path, rgb: np.ndarray) -> None:
    _demo().write_png(Path(path), rgb)


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000 or abs(v) < 0.01:
        return f"{v:.0e}".replace("+0", "").replace("-0", "-")
    return f"{v:g}" if abs(v) >= 10 else f"{v:.2f}".rstrip("0").rstrip(".")


def _line(canvas: np.ndarray, x0: float, y0: float, x1: float, y1: float, color, width: int = 2) -> None:
    n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
    xs = np.rint(np.linspace(x0, x1, n)).astype(int)
    ys = np.rint(np.linspace(y0, y1, n)).astype(int)
    h, w = canvas.shape[:2]
    for dy in range(-(width // 2), width - width // 2):
        for dx in range(-(width // 2), width - width // 2):
            yy, xx = ys + dy, xs + dx
            ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            canvas[yy[ok], xx[ok]] = color


def line_panel(series: Sequence[tuple[str, np.ndarray, np.ndarray, tuple]], title: str, xlabel: str,
               size: tuple[int, int] = (360, 520), ylim: Optional[tuple[float, float]] = None) -> np.ndarray:
    """One (H, W, 3) panel with axes, ticks and the given (name, x, y, colour) polylines."""
    d = _demo()
    h, w = size
    canvas = np.full((h, w, 3), 250, np.uint8)
    left, right, top, bottom = 64, 14, 40, 44
    pw, ph = w - left - right, h - top - bottom
    xs_all = np.concatenate([np.asarray(s[1], float) for s in series if len(s[1])] or [np.zeros(1)])
    ys_all = np.concatenate([np.asarray(s[2], float) for s in series if len(s[2])] or [np.zeros(1)])
    ys_fin = ys_all[np.isfinite(ys_all)]
    x_lo, x_hi = float(xs_all.min()), float(max(xs_all.max(), xs_all.min() + 1))
    if ylim is not None:
        y_lo, y_hi = ylim
    else:
        y_lo, y_hi = (float(ys_fin.min()), float(ys_fin.max())) if ys_fin.size else (0.0, 1.0)
        pad = 0.05 * (y_hi - y_lo) if y_hi > y_lo else 0.5
        y_lo, y_hi = y_lo - pad, y_hi + pad

    def px(x):
        return left + (np.asarray(x, float) - x_lo) / (x_hi - x_lo) * pw

    def py(y):
        return top + ph - (np.asarray(y, float) - y_lo) / (y_hi - y_lo) * ph

    grid, axis, ink = (222, 222, 222), (60, 60, 60), (40, 40, 40)
    for t in _nice_ticks(y_lo, y_hi):
        yy = float(py(t))
        _line(canvas, left, yy, left + pw, yy, grid, 1)
        lab = _fmt(t)
        d.draw_text(canvas, lab, int(yy) - 3, left - 6 - d.text_width(lab, 1), scale=1, color=ink)
    for t in _nice_ticks(x_lo, x_hi):
        xx = float(px(t))
        _line(canvas, xx, top, xx, top + ph, grid, 1)
        lab = _fmt(t)
        d.draw_text(canvas, lab, top + ph + 6, int(xx) - d.text_width(lab, 1) // 2, scale=1, color=ink)
    _line(canvas, left, top, left, top + ph, axis, 1)
    _line(canvas, left, top + ph, left + pw, top + ph, axis, 1)
    d.draw_text(canvas, title, 10, left, scale=2, color=ink)
    d.draw_text(canvas, xlabel, h - 16, left + pw // 2 - d.text_width(xlabel, 1) // 2, scale=1, color=ink)
    for k, (name, x, y, color) in enumerate(series):
        x, y = np.asarray(x, float), np.asarray(y, float)
        ok = np.isfinite(y)
        x, y = x[ok], y[ok]
        if len(x) == 1:
            _line(canvas, float(px(x[0])) - 3, float(py(y[0])), float(px(x[0])) + 3, float(py(y[0])), color, 3)
        for i in range(len(x) - 1):
            _line(canvas, float(px(x[i])), float(py(y[i])), float(px(x[i + 1])), float(py(y[i + 1])), color, 2)
        lx = left + pw - d.text_width(name, 1) - 8
        ly = top + 6 + 12 * k
        canvas[ly:ly + 7, lx - 14:lx - 4] = color
        d.draw_text(canvas, name, ly, lx, scale=1, color=ink)
    return canvas


def training_curve(path: Path, steps: np.ndarray, loss: np.ndarray, val_steps: np.ndarray, val_dice: np.ndarray,
                   title: str) -> None:
    """Loss per step (and its moving average) beside the validation Dice."""
    d = _demo()
    k = max(1, len(loss) // 20)
    smooth = np.convolve(loss, np.ones(k) / k, mode="valid") if len(loss) >= k else loss
    series = [("LOSS", steps, loss, (160, 190, 230) if k > 1 else (30, 80, 180))]
    if k > 1:
        series.append((f"MEAN OF {k}", steps[k - 1:], smooth, (30, 80, 180)))
    left = line_panel(series, "TRAINING LOSS", "STEP")
    right = line_panel([("VAL DICE", val_steps, val_dice, (200, 60, 40))], "VALIDATION DICE", "STEP",
                       ylim=(0.0, 1.0))
    head = np.full((30, left.shape[1] + right.shape[1], 3), 250, np.uint8)
    d.draw_text(head, title, 8, 10, scale=2, color=(40, 40, 40))
    write_png(path, np.concatenate([head, np.concatenate([left, right], axis=1)], axis=0))


def validation_slices(path: Path, image: np.ndarray, truth: np.ndarray, pred: np.ndarray, title: list[str]) -> None:
    """Axial / coronal / sagittal mid-slices of an (x, y, z) RAS volume with the true and the
    predicted labels drawn as coloured boundaries."""
    d = _demo()
    img_sl = d.mid_slices(image)
    canvas = d.montage([("TRUE LABELS", img_sl), ("PREDICTED", img_sl)], ["axial", "coronal", "sagittal"],
                       [d.mid_slices(truth), d.mid_slices(pred)], (0.0, 1.0), title,
                       zoom=max(1, 192 // max(image.shape)))
    write_png(path, canvas)
