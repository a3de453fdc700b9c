"""Sliding-window inference on the device with MONAI's signature and numerics.

``sliding_window_inference`` visits the same windows in the same order as
``monai.inferers.sliding_window_inference``, weights them with the same importance map and adds
them in the same order, so float32 results equal MONAI's to rounding. Per batch of windows it
runs one gather op (into a buffer allocated once), the predictor and one stitch op; nothing in
the loop synchronises the host. The count map and importance map depend only on the layout;
:class:`SlidingWindowInferer` caches them across calls.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import torch

from .transforms import _host_to, _is_meta_tensor

__all__ = ["sliding_window_inference", "SlidingWindowInferer", "SlidingWindowInfererAdapt", "SliceInferer"]

_PAD_MODES = {"constant": 0, "reflect": 1, "replicate": 2, "circular": 3}
_BLEND_MODES = ("constant", "gaussian")


def _per_axis(value: Union[float, Sequence[float]], name: str) -> list[float]:
    if isinstance(value, (int, float)):
        return [float(value)] * 3
    value = [float(v) for v in value]
    if len(value) != 3:
        raise ValueError(f"{name} must be a number or one value per spatial axis (3), got {value}")
    return value


def _roi(roi_size: Union[int, Sequence[Optional[int]]], image_size: Sequence[int]) -> list[int]:
    if isinstance(roi_size, int):
        roi = [roi_size] * 3
    else:
        roi = list(roi_size)
        if len(roi) != 3:
            raise ValueError(
                f"roi_size must have one value per spatial axis of the 5-D input (3), got {len(roi)}: "
                f"{roi_size}")
    # MONAI's fall_back_tuple: None or non-positive -> the image size.
    return [int(s) if r is None or int(r) <= 0 else int(r) for r, s in zip(roi, image_size)]


class _Layout:
    """The window grid of one image size (torch.ops.voxaug.window_layout)."""

    def __init__(self, size: Sequence[int], roi: Sequence[int], overlap: Sequence[float]):
        v = torch.ops.voxaug.window_layout(list(size), list(roi), list(overlap))
        self.size, self.roi, self.overlap = list(size), list(roi), list(overlap)
        self.count, self.padded, self.pad_before, self.interval = v[0:3], v[3:6], v[6:9], v[9:12]
        self.per_image = self.count[0] * self.count[1] * self.count[2]

    def starts(self, k: int) -> list[int]:
        """Padded-space start of window k of an image (image-major, last axis fastest)."""
        idx = [k // (self.count[1] * self.count[2]), (k // self.count[2]) % self.count[1], k % self.count[2]]
        return [self.start(a, idx[a]) for a in range(3)]

    def start(self, axis: int, k: int) -> int:
        """Padded-space start of the k-th window along `axis`."""
        s = k * self.interval[axis]
        return s - max(s + self.roi[axis] - self.padded[axis], 0)


def _flatten(out: Any) -> tuple[Optional[list], list[torch.Tensor]]:
    """MONAI's _flatten_struct: (sorted dict keys or None, the outputs as a list)."""
    if isinstance(out, torch.Tensor):
        return None, [out]
    if isinstance(out, Mapping):
        keys = sorted(out.keys())
        return keys, [out[k] for k in keys]
    return None, list(out)


def _pack(keys: Optional[list], outs: list[torch.Tensor]) -> Any:
    """MONAI's _pack_struct: a dict for dict outputs, else one tensor or a tuple of several."""
    if keys is not None:
        return dict(zip(keys, outs))
    if len(outs) == 1:
        return outs[0]
    return tuple(outs)


def _map_to(t: torch.Tensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A weight map (the caller's roi_weight_map, process_fn's weight) onto `device` in `dtype`,
    the same values as ``t.to(device=device, dtype=dtype)``. A host map bound for a CUDA device is
    cast on the host and copied from a fresh pinned buffer without blocking (transforms._host_to;
    a plain ``.to`` from pageable memory blocks the host). The caching host allocator keeps that
    buffer until the copy has run (the copy records an event on the stream), and the buffer is
    never the caller's own tensor, so changing the caller's map after the call cannot race it."""
    if t.device.type != "cpu" or device.type != "cuda":
        return t.to(device=device, dtype=dtype)
    return _host_to(t.to(dtype), device)  # a fresh pinned buffer even for a pinned map


def _nvtx(name: str, on_cuda: bool):
    if on_cuda:
        return torch.cuda.nvtx.range(name)
    import contextlib

    return contextlib.nullcontext()


def sliding_window_inference(
    inputs: torch.Tensor,
    roi_size: Union[Sequence[int], int],
    sw_batch_size: int,
    predictor: Callable[..., Any],
    overlap: Union[Sequence[float], float] = 0.25,
    mode: str = "constant",
    sigma_scale: Union[Sequence[float], float] = 0.125,
    padding_mode: str = "constant",
    cval: float = 0.0,
    sw_device: Union[torch.device, str, None] = None,
    device: Union[torch.device, str, None] = None,
    progress: bool = False,
    roi_weight_map: Optional[torch.Tensor] = None,
    process_fn: Optional[Callable] = None,
    buffer_steps: Optional[int] = None,
    buffer_dim: int = -1,
    with_coord: bool = False,
    *args: Any,
    window_dtype: Optional[torch.dtype] = None,
    output_dtype: Optional[torch.dtype] = None,
    argmax: bool = False,
    _cache: Optional[dict] = None,
    **kwargs: Any,
) -> Any:
    """MONAI's ``sliding_window_inference`` (same arguments, same results) on 5-D (N, C, D, H, W).

    The predictor gets (B, C, roi) windows -- a buffer reused from batch to batch (clone it to keep
    it) -- and returns a tensor, a tuple or a dict of (B, K, roi) tensors of any float dtype.
    Outputs accumulate in float32 (float64 for float64 inputs) and come back in the input's dtype.
    Extra options: ``window_dtype`` (dtype handed to the predictor, e.g. torch.float16),
    ``output_dtype`` (e.g. torch.float16 probabilities), ``argmax`` (return (N, 1, D, H, W) int64
    labels instead of probabilities). Memory: where the result is a tensor of its own (argmax, an
    ``output_dtype`` other than the accumulator's, or an image smaller than the roi on some axis)
    and the windows come in several rows along d, each float32 accumulator holds one window row's
    roi d planes instead of the padded d (a ring, drained row by row into the result): e.g. 105
    classes on 1 x 1 x 300 x 512 x 512 (d first) with roi d 96 need 10.6 GB instead of 33 GB,
    plus the 79 MB of uint8 labels. Same results.

    ``process_fn(outputs, windows, importance_map) -> (outputs, weight)`` is MONAI's: called per
    window batch with the predictor's outputs as a tuple, the windows on ``sw_device`` and the
    roi-sized importance map (``roi_weight_map`` if given, else ``mode``'s map) on ``sw_device``
    in the input's dtype; it returns the outputs to stitch and the roi-sized map (shape roi or
    (1, 1, *roi)) that multiplies this batch. As in MONAI, the count map that divides the sum is
    the one returned for the first batch. Its map is copied to ``device`` per batch (a host sync
    when that copy leaves the GPU); the default path (no ``process_fn``) is unchanged.

    Multi-resolution outputs (MONAI's zoom): an output whose spatial size differs from the roi's,
    scale z = out / roi per axis, is stitched as MONAI does, into an output of int(padded size * z)
    at the windows' scaled slices int(start * z) : int(stop * z), with the weight map resized by
    ``nearest-exact`` interpolation (within a batch each scaled output resizes the map the previous
    scaled output used, as MONAI's loop does), a count map of its own from the first batch, the
    final crop of a padded image at round(pad * out / roi). That path adds window by window with
    torch ops (no host sync, but a launch per window on CUDA); outputs at the roi's size keep the
    fused stitch (after a scaled output, where MONAI fails on the resized map, they use the map).

    ``condition=`` (a keyword, MONAI's conditional predictors): a (N, Cc, D, H, W) tensor of the
    inputs' batch and spatial size, padded as the inputs and cut into the same windows, handed to
    the predictor as ``condition=`` with each batch (float conditions through the window gather into
    a buffer reused from batch to batch, others by slicing as MONAI does).

    ``buffer_steps`` / ``buffer_dim`` (MONAI's buffered stitching, a memory and copy saver) are
    checked as MONAI checks them and change nothing else: the result is the unbuffered one (MONAI's
    buffered order adds the windows of a voxel in another order, so it can differ in the last
    bits; MONAI's buffered mode also returns only the first of several outputs, voxaug all).
    """
    if not isinstance(inputs, torch.Tensor) or inputs.dim() != 5:
        got = f"{inputs.dim()}-D" if isinstance(inputs, torch.Tensor) else type(inputs).__name__
        raise ValueError(f"inputs must be a 5-D (N, C, D, H, W) tensor, got {got}")
    if not inputs.is_floating_point():
        raise ValueError(f"inputs must be a float tensor, got {inputs.dtype}")
    meta_source = inputs if _is_meta_tensor(inputs) else None
    if meta_source is not None:  # MONAI MetaTensor: plain tensor inside, metadata back on the output
        inputs = inputs.as_tensor()
    if isinstance(sw_batch_size, bool) or not isinstance(sw_batch_size, int) or sw_batch_size < 1:
        raise ValueError(f"sw_batch_size must be an int >= 1, got {sw_batch_size!r}")
    if mode not in _BLEND_MODES:
        raise ValueError(f"mode must be one of {_BLEND_MODES}, got {mode!r}")
    if padding_mode not in _PAD_MODES:
        raise ValueError(f"padding_mode must be one of {tuple(_PAD_MODES)}, got {padding_mode!r}")
    if process_fn is not None and not callable(process_fn):
        raise ValueError("process_fn must be callable (outputs, windows, importance_map) -> (outputs, weight), "
                         f"got {type(process_fn).__name__}")
    if buffer_steps is not None and buffer_steps > 0 and not -3 <= buffer_dim <= 3:
        raise ValueError(f"buffer_dim must be in [-3, 3], got {buffer_dim}.")  # MONAI's check (and range)
    overlap_l = _per_axis(overlap, "overlap")
    for o in overlap_l:
        if not 0.0 <= o < 1.0:
            raise ValueError(f"overlap must be >= 0 and < 1, got {overlap}")
    sigma_l = _per_axis(sigma_scale, "sigma_scale")
    size = list(inputs.shape[2:])
    roi = _roi(roi_size, size)
    layout = _Layout(size, roi, overlap_l)
    condition = kwargs.pop("condition", None)
    if condition is not None:
        if _is_meta_tensor(condition):
            condition = condition.as_tensor()
        if (not isinstance(condition, torch.Tensor) or condition.dim() != 5 or condition.shape[0] != inputs.shape[0]
                or list(condition.shape[2:]) != size):
            got = tuple(condition.shape) if isinstance(condition, torch.Tensor) else type(condition).__name__
            raise ValueError(f"condition must be a 5-D tensor of the inputs' batch and spatial size "
                             f"({inputs.shape[0]}, C, {', '.join(map(str, size))}), got {got}")
    sw_device = torch.device(sw_device) if sw_device is not None else inputs.device
    device = torch.device(device) if device is not None else inputs.device
    acc_dtype = torch.float64 if inputs.dtype == torch.float64 else torch.float32
    on_cuda = inputs.is_cuda or device.type == "cuda"

    cached = _cache if _cache is not None and process_fn is None else {}
    weight = cached.get("weight")
    if process_fn is not None:
        # MONAI hands process_fn the map itself (constant mode: ones) on sw_device in the input's
        # dtype; the weights that multiply each batch and the count map come from its returns.
        if roi_weight_map is not None:
            if roi_weight_map.numel() != roi[0] * roi[1] * roi[2]:
                raise ValueError(f"roi_weight_map must have the roi's {roi} voxels, got {tuple(roi_weight_map.shape)}")
            base_map = _map_to(roi_weight_map, sw_device, inputs.dtype)
        else:
            base_map = torch.ops.voxaug.window_importance_map(roi, mode, sigma_l, inputs.dtype, sw_device)
    elif "weight" not in cached:
        if roi_weight_map is not None:
            if roi_weight_map.numel() != roi[0] * roi[1] * roi[2]:
                raise ValueError(f"roi_weight_map must have the roi's {roi} voxels, got {tuple(roi_weight_map.shape)}")
            weight = _map_to(roi_weight_map, device, acc_dtype).contiguous()
        elif mode == "gaussian":
            weight = torch.ops.voxaug.window_importance_map(roi, mode, sigma_l, inputs.dtype, sw_device)
            weight = _map_to(weight, device, acc_dtype).contiguous()
        else:
            weight = None
        cached["weight"] = weight

    total = inputs.shape[0] * layout.per_image
    # The stitch stores on each voxel's first window (no zero fill of the accumulators) and, where
    # the result is the accumulator itself (nothing cropped, no cast, no argmax) and the count map
    # is fixed (no process_fn), divides on its last (no final pass): the same bits either way.
    out_dtype = output_dtype or (torch.int64 if argmax else inputs.dtype)
    in_place = not argmax and out_dtype == acc_dtype and list(layout.padded) == size
    last_divide = in_place and process_fn is None
    # Where the result is a buffer of its own (argmax, a cast, a crop) and the windows come in
    # several rows along d, each accumulator is a ring of one window row's planes (roi d, not the
    # padded d): a row's finished planes go to the output before the next row reuses them -- the
    # same sums and quotients in a fraction of the memory. Not with process_fn (its count map
    # comes from the first batch's weights).
    ring = not in_place and process_fn is None and layout.count[0] > 1
    row_windows = layout.count[1] * layout.count[2]
    # Non-constant weights: the division reads a count map (computing the count per divided row
    # segment in the stitch would re-walk the covering windows for each one); an inferer keeps it.
    count = cached.get("count")
    # (A ring's drains read it too where an inferer keeps it; a call on its own computes the
    # count of each drained plane range on the fly, as the final pass does.)
    if (last_divide or (ring and _cache is not None)) and count is None and weight is not None:
        like = torch.empty((0, 0, 0, 0, 0), dtype=acc_dtype, device=device)  # the map's dtype and device
        count = cached["count"] = torch.ops.voxaug.window_count(like, weight, size, roi, overlap_l)
    # Buffer and accumulator from window_accumulator: on the host on transparent huge pages
    # (fresh 4 KiB pages fault once each, which dominates small-overlap runs on the CPU).
    buffer = torch.ops.voxaug.window_accumulator([min(sw_batch_size, total), inputs.shape[1], *roi],
                                                 window_dtype or inputs.dtype, inputs.device, False)
    cond_buffer = cond_padded = None
    if condition is not None and condition.is_floating_point():
        cond_buffer = torch.ops.voxaug.window_accumulator([min(sw_batch_size, total), condition.shape[1], *roi],
                                                          condition.dtype, condition.device, False)
    elif condition is not None:  # MONAI's F.pad of the condition, then its slices
        pad = []
        for a in (2, 1, 0):
            before = layout.pad_before[a]
            pad += [before, layout.padded[a] - size[a] - before]
        cond_padded = condition
        if any(pad):
            mode_ = {"constant": "constant", "reflect": "reflect", "replicate": "replicate",
                     "circular": "circular"}[padding_mode]
            cond_padded = torch.nn.functional.pad(condition, pad, mode=mode_,
                                                  value=cval if mode_ == "constant" else None)
    accs: list[torch.Tensor] = []
    ring_outs: list[Optional[torch.Tensor]] = []  # per output: the result a ring drains into

    def drain(row: int) -> None:
        """The finished planes of window row `row` of every ring accumulator into its output."""
        n, k = divmod(row, layout.count[0])
        d0 = 0 if k == 0 else layout.start(0, k)
        d1 = layout.padded[0] if k == layout.count[0] - 1 else layout.start(0, k + 1)
        with _nvtx("voxaug.window.finalize", on_cuda):
            for a, o in zip(accs, ring_outs):
                if o is not None:
                    torch.ops.voxaug.window_finalize_planes_(a[n:n + 1], count, weight, size, roi, overlap_l,
                                                             o[n:n + 1], d0, d1, argmax)

    keys: Any = None
    first_weight: Optional[torch.Tensor] = None
    batches = (total + sw_batch_size - 1) // sw_batch_size
    for b, first in enumerate(range(0, total, sw_batch_size)):
        count_b = min(sw_batch_size, total - first)
        win = buffer if count_b == buffer.shape[0] else buffer[:count_b]
        with _nvtx("voxaug.window.gather", on_cuda):
            torch.ops.voxaug.window_gather_(inputs, win, roi, overlap_l, first, _PAD_MODES[padding_mode], float(cval))
        x = win if win.device == sw_device else win.to(sw_device)
        if cond_buffer is not None:
            cwin = cond_buffer if count_b == cond_buffer.shape[0] else cond_buffer[:count_b]
            torch.ops.voxaug.window_gather_(condition, cwin, roi, overlap_l, first, _PAD_MODES[padding_mode],
                                            float(cval))
            kwargs["condition"] = cwin if cwin.device == sw_device else cwin.to(sw_device)
        elif cond_padded is not None:
            kwargs["condition"] = torch.cat([cond_padded[sl] for sl in (
                tuple(c) for c in _coords(layout, first, count_b))]).to(sw_device)
        with _nvtx("voxaug.window.predict", on_cuda):
            if with_coord:
                out = predictor(x, _coords(layout, first, count_b), *args, **kwargs)
            else:
                out = predictor(x, *args, **kwargs)
        k, outs = _flatten(out)
        if process_fn is not None:
            outs, weight = _process(process_fn, outs, x, base_map, roi, inputs.dtype, device, acc_dtype)
            if b == 0:  # a copy: process_fn may return one buffer it changes per batch (as the C++ twin)
                first_weight = weight.clone()
        if b == 0:
            keys = k
        elif (k is None) != (keys is None) or len(outs) != max(len(accs), 1):
            raise ValueError("the predictor returned a different structure of outputs than in earlier windows")
        if ring and first > 0 and first % row_windows == 0:
            drain(first // row_windows - 1)
        with _nvtx("voxaug.window.stitch", on_cuda):
            plain_preds: list[tuple[torch.Tensor, torch.Tensor]] = []  # (accumulator, output)
            w_run = None  # MONAI's w_t within a batch: each scaled output resizes the previous one's
            for i, pred in enumerate(outs):
                pred = _check_pred(pred, count_b, i)
                if list(pred.shape[2:]) != roi or (len(accs) > i and isinstance(accs[i], _Zoomed)):
                    if w_run is None:
                        w_run = weight if weight is not None else torch.ones(roi, dtype=acc_dtype, device=device)
                    if len(accs) <= i:
                        accs.append(_Zoomed(layout, inputs.shape[0], pred, acc_dtype, device, i))
                        ring_outs.append(None)
                    w_run = accs[i].add(pred, w_run, first, count_b, i)
                    continue
                if len(accs) > i and accs[i].shape[1] != pred.shape[1]:
                    raise ValueError(f"the predictor returned {pred.shape[1]} channels in output {i} after "
                                     f"{accs[i].shape[1]} in earlier windows")
                if pred.device != device:
                    pred = pred.to(device)
                if len(accs) <= i:
                    depth = roi[0] if ring else layout.padded[0]
                    accs.append(_accumulator([inputs.shape[0], pred.shape[1], depth, *layout.padded[1:]],
                                             acc_dtype, device))
                    ring_outs.append(_ring_output(accs[i], size, out_dtype, argmax) if ring else None)
                plain_preds.append((accs[i], pred))
            j0 = 0  # a ring: the batch window row by window row, each finished row drained first
            while j0 < count_b:
                w0 = first + j0
                j1 = min(count_b, (w0 // row_windows + 1) * row_windows - first) if ring else count_b
                if j0 > 0 and w0 % row_windows == 0:
                    drain(w0 // row_windows - 1)
                for acc, pred in plain_preds:
                    part = pred if j1 - j0 == count_b else pred[j0:j1]
                    torch.ops.voxaug.window_stitch_(acc, part, weight, size, roi, overlap_l, w0, True, last_divide,
                                                    count if last_divide else None, ring)
                j0 = j1
        if progress:
            print(f"voxaug sliding window: batch {b + 1}/{batches}", file=sys.stderr)

    plain = [a for a in accs if not isinstance(a, _Zoomed)]
    if ring:
        drain(total // row_windows - 1)
        done = [o for o in ring_outs if o is not None]
    elif last_divide:
        done = plain  # divided voxel by voxel in the stitch
    else:
        if process_fn is not None:
            weight = first_weight  # MONAI builds the count map from the first batch's weight
        with _nvtx("voxaug.window.finalize", on_cuda):
            done = _finalize(plain, cached if _cache is not None and process_fn is None else None, weight,
                             layout, overlap_l, in_place, out_dtype, argmax)
    done.reverse()
    results = [a.finish(out_dtype, argmax) if isinstance(a, _Zoomed) else done.pop() for a in accs]
    if meta_source is not None:
        results = [_with_meta(r, meta_source) for r in results]
    return _pack(keys, results)


def _accumulator(shape: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A stitch accumulator (no zero fill: the stitch stores each voxel's first window)."""
    return torch.ops.voxaug.window_accumulator(shape, dtype, device, False)


def _ring_output(acc: torch.Tensor, size: list[int], dtype: torch.dtype, argmax: bool) -> torch.Tensor:
    """The result a ring accumulator drains into: (N, K, size), or (N, 1, size) labels."""
    return torch.ops.voxaug.window_accumulator([acc.shape[0], 1 if argmax else acc.shape[1], *size], dtype,
                                               acc.device, False)


def _finalize(accs: list[torch.Tensor], cache: Optional[dict], weight: Optional[torch.Tensor], layout: _Layout,
              overlap: list[float], in_place: bool, out_dtype: torch.dtype, argmax: bool) -> list[torch.Tensor]:
    """The final pass over each accumulator: / count, crop, cast or argmax. The count map is computed
    on the fly; an inferer (``cache``) keeps one for non-constant weights (reading it beats
    re-summing the map over every window)."""
    size, roi = layout.size, layout.roi
    count = cache.get("count") if cache is not None else None
    if count is None and cache is not None and weight is not None:
        count = cache["count"] = torch.ops.voxaug.window_count(accs[0], weight, size, roi, overlap)
    results = []
    for acc in accs:
        if in_place:  # no second full-size buffer
            torch.ops.voxaug.window_finalize_(acc, count, weight, size, roi, overlap)
            results.append(acc)
        else:
            results.append(torch.ops.voxaug.window_finalize(acc, count, weight, size, roi, overlap, out_dtype, argmax))
    return results


def _with_meta(out: torch.Tensor, src: Any) -> Any:
    """MONAI's result type for MetaTensor inputs: the input's metadata (not its applied operations)."""
    from monai.utils import convert_to_dst_type

    temp = type(src)([]).copy_meta_from(src, copy_attr=False)
    return convert_to_dst_type(out, temp, device=out.device)[0]


def _process(process_fn: Callable, outs: list[torch.Tensor], windows: torch.Tensor, base_map: torch.Tensor,
             roi: Sequence[int], compute_dtype: torch.dtype, device: torch.device,
             acc_dtype: torch.dtype) -> tuple[list[torch.Tensor], torch.Tensor]:
    """One batch through MONAI's process_fn: its outputs, and its weight map as the stitch takes it."""
    ret = process_fn(tuple(outs), windows, base_map)
    if not isinstance(ret, (tuple, list)) or len(ret) != 2:
        raise ValueError(f"process_fn must return (outputs, weight), got {type(ret).__name__}")
    new_outs, w = ret
    new_outs = [new_outs] if isinstance(new_outs, torch.Tensor) else list(new_outs)
    if not new_outs:
        raise ValueError("process_fn returned no outputs")
    if not isinstance(w, torch.Tensor) or w.numel() != roi[0] * roi[1] * roi[2] or list(w.shape[-3:]) != list(roi):
        got = tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
        raise ValueError(f"process_fn must return a roi-sized weight map, shape {tuple(roi)} or (1, 1, "
                         f"{', '.join(map(str, roi))}) (one map for the whole batch), got {got}")
    # MONAI: w.to(compute_dtype) multiplies the outputs; the stitch takes it in the accumulator's dtype.
    w = _map_to(w.to(dtype=compute_dtype), device, acc_dtype).reshape(list(roi)).contiguous()
    return new_outs, w


def _check_pred(pred: Any, count: int, i: int) -> torch.Tensor:
    if not isinstance(pred, torch.Tensor) or pred.dim() != 5:
        raise ValueError(f"the predictor's output {i} must be a 5-D (B, K, D, H, W) tensor, got "
                         f"{tuple(pred.shape) if isinstance(pred, torch.Tensor) else type(pred).__name__}")
    if pred.shape[0] != count:
        raise ValueError(f"the predictor changed the window batch: given {count} windows, output {i} is "
                         f"{tuple(pred.shape)}")
    if min(pred.shape[1:]) < 1:
        raise ValueError(f"the predictor's output {i} is empty: {tuple(pred.shape)}")
    if not pred.is_floating_point():
        raise ValueError(f"the predictor's output {i} must be a float tensor, got {pred.dtype}")
    return pred


class _Zoomed:
    """One multi-resolution output (spatial size != roi), stitched as MONAI's loop does: windows at
    int(start * z) : int(stop * z), the weight map resized by nearest-exact interpolation, a count
    map from the first batch's map, the final crop of a padded image at round(pad * out / roi)."""

    def __init__(self, layout: _Layout, batch: int, pred: torch.Tensor, acc_dtype: torch.dtype,
                 device: torch.device, i: int):
        self.layout, self.seg = layout, list(pred.shape[2:])
        self.z = [o / float(r) for o, r in zip(self.seg, layout.roi)]  # MONAI's z_scale
        self.shape = [int(p * z) for p, z in zip(layout.padded, self.z)]
        self.slices = []
        for k in range(layout.per_image):
            sl = []
            for a, s in enumerate(layout.starts(k)):
                lo, hi = int(s * self.z[a]), int((s + layout.roi[a]) * self.z[a])
                if hi - lo != self.seg[a]:
                    raise ValueError(
                        f"the predictor's output {i} ({tuple(pred.shape)}) scales the roi {layout.roi} by {self.z}: "
                        f"window {k} would cover {hi - lo} voxels of axis {a} at that scale, not {self.seg[a]} "
                        "(MONAI cannot place it either)")
                sl.append(slice(lo, hi))
            self.slices.append(tuple(sl))
        self.channels = pred.shape[1]
        self.acc = torch.zeros([batch, self.channels, *self.shape], dtype=acc_dtype, device=device)
        self.count: Optional[torch.Tensor] = None

    def add(self, pred: torch.Tensor, w_prev: torch.Tensor, first: int, count: int, i: int) -> torch.Tensor:
        """Adds one batch of output i; returns the map it used (the next scaled output resizes it)."""
        if list(pred.shape[2:]) != self.seg or pred.shape[1] != self.channels:
            raise ValueError(f"the predictor's output {i} is {tuple(pred.shape)} after ({count}, {self.channels}, "
                             f"{', '.join(map(str, self.seg))}) in earlier windows")
        w = w_prev.reshape(1, 1, *w_prev.shape[-3:])
        if list(w.shape[2:]) != self.seg:
            w = torch.nn.functional.interpolate(w, self.seg, mode="nearest-exact")
        if self.count is None:  # MONAI: the count map from the first batch's map
            self.count = torch.zeros([1, 1, *self.shape], dtype=self.acc.dtype, device=self.acc.device)
            wc = w.to(device=self.acc.device, dtype=self.acc.dtype)
            for sl in self.slices:
                self.count[(slice(None), slice(None), *sl)] += wc
        # MONAI multiplies the predictor's output in place (rounded to its dtype), then adds it.
        prod = (pred * w.to(pred.device)).to(pred.dtype).to(self.acc.device)
        for j in range(count):
            n, k = divmod(first + j, self.layout.per_image)
            self.acc[(slice(n, n + 1), slice(None), *self.slices[k])] += prod[j:j + 1]
        return w

    def finish(self, out_dtype: torch.dtype, argmax: bool) -> torch.Tensor:
        out = self.acc.div_(self.count)
        lay = self.layout
        if list(lay.padded) != list(lay.size):  # MONAI's final slicing, zoom = output / roi
            zs = [o / r for o, r in zip(self.shape, lay.roi)]
            out = out[(slice(None), slice(None), *(
                slice(int(round(lay.pad_before[a] * zs[a])), int(round((lay.pad_before[a] + lay.size[a]) * zs[a])))
                for a in range(3)))]
        if argmax:
            out = torch.argmax(out, dim=1, keepdim=True)
        return out.to(out_dtype)


def _coords(layout: _Layout, first: int, count: int) -> list:
    """MONAI's unravel_slice for with_coord=True: per window [batch slice, channel slice, d, h, w slices]."""
    out = []
    for idx in range(first, first + count):
        n, k = divmod(idx, layout.per_image)
        s = layout.starts(k)
        out.append([slice(n, n + 1), slice(None)] + [slice(s[a], s[a] + layout.roi[a]) for a in range(3)])
    return out


class SlidingWindowInferer:
    """MONAI's ``SlidingWindowInferer``: the options once; ``inferer(inputs, network)``.

    MONAI's arguments in MONAI's order; ``cpu_thresh``: with ``device`` None, images of more
    than that many voxels (spatial) are stitched on the CPU, as MONAI; ``device``,
    ``buffer_steps`` and ``buffer_dim`` may also be given per call (keywords, as MONAI). The
    voxaug extensions are keyword-only. The importance map and the count map are cached per
    (image size, dtype, device).

    ``cuda_graph=True`` (voxaug extension, CUDA inputs only): the whole pass -- every window
    batch's gather, the predictor and the stitch, then the final divide -- is captured once per
    (image shape, dtype, device, network) into a CUDA graph and replayed on later calls (the input
    copied into the graph's static buffer, the result cloned out), so the host launches one graph
    instead of a few kernels per window batch. The first call runs the pass eagerly on a side
    stream (warm-up: lazy initialisation, cuDNN autotuning, the cached maps), then captures it.
    The predictor must be capturable: static shapes, no host synchronisation, no CPU tensors
    created inside; under ``torch.autocast`` pass ``cache_enabled=False``. ``*args``/``**kwargs``
    and ``with_coord`` coordinates are captured as constants of the first call. Results equal the
    eager pass bit for bit (the same kernels in the same order).
    """

    def __init__(self, roi_size: Union[Sequence[int], int], sw_batch_size: int = 1,
                 overlap: Union[Sequence[float], float] = 0.25, mode: str = "constant",
                 sigma_scale: Union[Sequence[float], float] = 0.125, padding_mode: str = "constant",
                 cval: float = 0.0, sw_device: Union[torch.device, str, None] = None,
                 device: Union[torch.device, str, None] = None, progress: bool = False,
                 cache_roi_weight_map: bool = True, cpu_thresh: Optional[int] = None,
                 buffer_steps: Optional[int] = None, buffer_dim: int = -1, with_coord: bool = False, *,
                 roi_weight_map: Optional[torch.Tensor] = None, window_dtype: Optional[torch.dtype] = None,
                 output_dtype: Optional[torch.dtype] = None, argmax: bool = False,
                 cuda_graph: bool = False) -> None:
        if isinstance(sw_batch_size, bool) or not isinstance(sw_batch_size, int) or sw_batch_size < 1:
            raise ValueError(f"sw_batch_size must be an int >= 1, got {sw_batch_size!r}")
        if cpu_thresh is not None and (isinstance(cpu_thresh, bool) or not isinstance(cpu_thresh, int)):
            raise ValueError(f"cpu_thresh must be an int (a voxel count) or None, got {cpu_thresh!r}")
        self.cpu_thresh, self.buffer_steps, self.buffer_dim = cpu_thresh, buffer_steps, buffer_dim
        self.roi_size, self.sw_batch_size, self.overlap = roi_size, sw_batch_size, overlap
        self.mode, self.sigma_scale, self.padding_mode, self.cval = mode, sigma_scale, padding_mode, cval
        self.sw_device, self.device, self.progress = sw_device, device, progress
        self.cache_roi_weight_map, self.roi_weight_map, self.with_coord = cache_roi_weight_map, roi_weight_map, with_coord
        self.window_dtype, self.output_dtype, self.argmax = window_dtype, output_dtype, argmax
        self.cuda_graph = bool(cuda_graph)
        self._caches: dict = {}
        self._graphs: dict = {}

    def __call__(self, inputs: torch.Tensor, network: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.cuda_graph:
            return self._graphed(inputs, network, *args, **kwargs)
        return self._run(inputs, network, *args, **kwargs)

    def _run(self, inputs: torch.Tensor, network: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # MONAI's per-call overrides, and its switch to stitching on the CPU for large images.
        device = kwargs.pop("device", self.device)
        buffer_steps = kwargs.pop("buffer_steps", self.buffer_steps)
        buffer_dim = kwargs.pop("buffer_dim", self.buffer_dim)
        if (device is None and self.cpu_thresh is not None and isinstance(inputs, torch.Tensor)
                and inputs.shape[2:].numel() > self.cpu_thresh):
            device = "cpu"
        key = (tuple(inputs.shape[2:]), inputs.dtype, str(device or inputs.device),
               str(self.sw_device or inputs.device))
        cache = self._caches.setdefault(key, {}) if self.cache_roi_weight_map else None
        return sliding_window_inference(
            inputs, self.roi_size, self.sw_batch_size, network, self.overlap, self.mode, self.sigma_scale,
            self.padding_mode, self.cval, self.sw_device, device, self.progress, self.roi_weight_map,
            None, buffer_steps, buffer_dim, self.with_coord, *args, window_dtype=self.window_dtype,
            output_dtype=self.output_dtype, argmax=self.argmax, _cache=cache, **kwargs)

    def _graphed(self, inputs: torch.Tensor, network: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("condition") is not None:
            raise ValueError("cuda_graph=True does not take condition= (a replay would reuse the capturing call's "
                             "condition); use cuda_graph=False")
        if not isinstance(inputs, torch.Tensor) or not inputs.is_cuda:
            raise ValueError("cuda_graph=True needs CUDA inputs, got "
                             f"{inputs.device if isinstance(inputs, torch.Tensor) else type(inputs).__name__}")
        for name, dev in (("sw_device", self.sw_device), ("device", self.device)):
            if dev is not None and torch.device(dev) != inputs.device:
                raise ValueError(f"cuda_graph=True needs {name} on the inputs' device {inputs.device}, got {dev}")
        meta_source = inputs if _is_meta_tensor(inputs) else None
        x = inputs.as_tensor() if meta_source is not None else inputs
        key = (tuple(x.shape), x.dtype, x.device, id(network))
        entry = self._graphs.get(key)
        if entry is None:
            # Everything on the inputs' device: torch.cuda.graph's default capture stream lives
            # on whichever device was current when it was first made, and the ops launch on the
            # current stream of the inputs' device; capturing elsewhere would record an empty
            # graph (its replays would return the capture run's output).
            with torch.cuda.device(x.device):
                static_in = x.clone()
                side = torch.cuda.Stream(device=x.device)
                side.wait_stream(torch.cuda.current_stream(x.device))
                with torch.cuda.stream(side):  # warm-up: lazy init, autotuning, the cached maps
                    self._run(static_in, network, *args, **kwargs)
                torch.cuda.current_stream(x.device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                try:
                    with torch.cuda.graph(graph, stream=side):
                        static_out = self._run(static_in, network, *args, **kwargs)
                except Exception as e:  # the predictor synchronised, allocated on the host, ...
                    raise RuntimeError("SlidingWindowInferer(cuda_graph=True): capturing the pass failed; the "
                                       "predictor must be CUDA-graph capturable (static shapes, no host sync; "
                                       "torch.autocast(cache_enabled=False)), or use cuda_graph=False") from e
            entry = self._graphs[key] = (graph, static_in, static_out)
        graph, static_in, static_out = entry
        with torch.cuda.device(x.device):
            static_in.copy_(x)
            graph.replay()
        keys, outs = _flatten(static_out)
        results = [o.clone() for o in outs]
        if meta_source is not None:
            results = [_with_meta(r, meta_source) for r in results]
        return _pack(keys, results)


class SlidingWindowInfererAdapt(SlidingWindowInferer):
    """MONAI's ``SlidingWindowInfererAdapt`` (VISTA3D's and Auto3DSeg's inferer): the arguments
    of :class:`SlidingWindowInferer`; where stitching on the GPU runs out of memory, the call is
    repeated with the stitching on the CPU (the output then on the CPU, as MONAI's) and
    ``cpu_thresh`` is lowered below this image's voxel count, so that later images at least as
    large go to the CPU at once. With ``device`` set, no adaptation (as MONAI).

    MONAI tries buffered stitching before the CPU (and halves its buffer on each failure); voxaug
    skips those tries: its ``buffer_steps`` keeps the whole accumulator (the result is the
    unbuffered one), so it would run out again. Its accumulator is already smaller where the
    result is a tensor of its own (``argmax``, ``output_dtype``: one window row of planes)."""

    def __call__(self, inputs: torch.Tensor, network: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.device is not None:
            return super().__call__(inputs, network, *args, **kwargs)
        cpu_cond = self.cpu_thresh is not None and inputs.shape[2:].numel() > self.cpu_thresh
        gpu_stitching = inputs.is_cuda and not cpu_cond
        try:
            return super().__call__(inputs, network, *args,
                                    device=inputs.device if gpu_stitching else torch.device("cpu"), **kwargs)
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one
            if not gpu_stitching or "OutOfMemoryError" not in type(e).__name__:
                raise
            import logging

            logging.getLogger(__name__).warning(
                f"GPU stitching failed ({e}), stitching on the CPU, image dim {tuple(inputs.shape)}.")
        self.cpu_thresh = inputs.shape[2:].numel() - 1  # MONAI's update: images this large go to the CPU
        return self._run(inputs, network, *args, device=torch.device("cpu"), **kwargs)


class SliceInferer(SlidingWindowInferer):
    """MONAI's ``SliceInferer(spatial_dim=0, *args, **kwargs)``: a 2-D network over the slices of a
    3-D volume. ``roi_size`` is 2-D; the windows are (1, roi) along ``spatial_dim`` (0, 1 or 2 of
    (D, H, W)): the network gets (B, C, h, w) slices (the condition's too, as its second argument)
    and its outputs come back with that axis, stitched as :class:`SlidingWindowInferer` stitches
    (the voxaug options included: ``argmax`` or ``output_dtype`` then keep one slice of planes
    when ``spatial_dim`` is 0). As MONAI's, the call's own ``*args`` / ``**kwargs`` other than
    ``condition`` do not reach the network."""

    def __init__(self, spatial_dim: int = 0, *args: Any, **kwargs: Any) -> None:
        self.spatial_dim = spatial_dim
        super().__init__(*args, **kwargs)
        self.orig_roi_size = tuple(self.roi_size) if isinstance(self.roi_size, Sequence) else (self.roi_size,)

    def __call__(self, inputs: torch.Tensor, network: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if isinstance(self.spatial_dim, bool) or self.spatial_dim not in (0, 1, 2):
            raise ValueError("`spatial_dim` can only be `0, 1, 2` with `[H, W, D]` respectively.")
        if len(self.orig_roi_size) != 2 or not isinstance(inputs, torch.Tensor) or inputs.dim() != 5:
            raise RuntimeError(f"Currently, only 2D `roi_size` ({self.orig_roi_size}) with 3D `inputs` tensor "
                               f"(shape={getattr(inputs, 'shape', None)}) is supported.")
        roi = list(self.orig_roi_size)
        roi.insert(self.spatial_dim, 1)
        self.roi_size = roi
        condition = kwargs.get("condition")
        if condition is not None and condition.shape != inputs.shape:
            raise ValueError(f"`condition` must match shape of `inputs` ({inputs.shape}), but got {condition.shape}")
        wrapped = lambda x, *a, **k: self.network_wrapper(network, x, *a, **k)  # noqa: E731
        if condition is not None:
            return super().__call__(inputs, wrapped, condition=condition)
        return super().__call__(inputs, wrapped)

    def network_wrapper(self, network: Callable[..., Any], x: torch.Tensor, condition: Optional[torch.Tensor] = None,
                        *args: Any, **kwargs: Any) -> Any:
        """The 2-D network on (B, C, h, w) slices; its outputs get the slice axis back."""
        dim = self.spatial_dim + 2
        x = x.squeeze(dim=dim)
        if condition is not None:
            out = network(x, condition.squeeze(dim=dim), *args, **kwargs)
        else:
            out = network(x, *args, **kwargs)
        if isinstance(out, torch.Tensor):
            return out.unsqueeze(dim=dim)
        if isinstance(out, Mapping):
            return {k: v.unsqueeze(dim=dim) for k, v in out.items()}
        return tuple(o.unsqueeze(dim=dim) for o in out)
