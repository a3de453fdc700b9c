#!/usr/bin/env python3
"""Registers, stack frame and spills of voxaug's CUDA kernels, from ptxas (no GPU needed).

Compiles the given .cu files with ``-Xptxas -v`` for one architecture and prints one row per
kernel. With ``--check`` it also applies the budgets below and exits 1 when a kernel exceeds
its budget or a budgeted kernel is missing (renamed: update the rule). The budgets guard what
the CUDA code was shaped for (session 26): the lean resample variants and the dense-field
kernel keep their state in registers; the pointwise chain does not spill.

    python3 scripts/ptxas_report.py kernels/resample/resample.cu            # the table
    python3 scripts/ptxas_report.py --check kernels/resample/resample.cu \\
        kernels/deform/deform.cu kernels/intensity/intensity.cu \\
        kernels/crop/crop.cu                                                # what ctest runs
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (source file, substring of the demangled kernel name, max registers, max stack bytes, max
# spill bytes) for every kernel whose name contains the substring; each rule must match a
# kernel when its file is compiled.
BUDGETS = [
    ("resample.cu", "ResampleForward<float, 0u>", 128, 64, 0),  # plain maps: affine, flips, crops
    ("resample.cu", "ResampleForward<float, 1u>", 128, 64, 64),  # dense / separable / row fields
    ("resample.cu", "ResampleForward<float, 4u>", 128, 512, 64),  # post steps (resolved parameters)
    ("deform.cu", "FieldDenseForward<float, false>", 128, 64, 0),
    ("intensity.cu", "ChainForward<float, float, float>", 128, 640, 0),
    ("intensity.cu", "ChainForward<unsigned char, float, float>", 128, 640, 0),
    # the patch tables are indexed in the parameter space, never copied to the stack
    ("crop.cu", "gather_copy<", 64, 0, 0),
    ("crop.cu", "aggregate_add_kernel<", 64, 0, 0),
    ("crop.cu", "aggregate_assign_kernel<", 64, 0, 0),
]
# Every kernel: a ceiling that only a regression reaches (the resample forward took 2 KiB
# before its functor became a __grid_constant__ parameter).
CEILING_STACK = 1536


def demangle(names: list[str]) -> list[str]:
    tool = shutil.which("c++filt")
    if tool is None or not names:
        return names
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def compile_report(nvcc: str, include: Path, arch: str, source: Path) -> list[dict]:
    cmd = [nvcc, "-DVOXAUG_WITH_CUDA=1", f"-I{include}", "-O3", "-DNDEBUG", "-std=c++17",
           f"--generate-code=arch=compute_{arch},code=sm_{arch}", "-Xptxas", "-v", "-x", "cu", "-c",
           str(source), "-o", "/dev/null"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        raise SystemExit(f"nvcc failed on {source}")
    rows, cur, frame = [], None, None
    for line in res.stderr.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur, frame = m.group(1), None
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            frame = [int(v) for v in m.groups()]
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and cur and frame is not None:
            rows.append({"mangled": cur, "file": source.name, "regs": int(m.group(1)), "stack": frame[0],
                         "spill": max(frame[1], frame[2])})
            cur = None
    for r, name in zip(rows, demangle([r["mangled"] for r in rows])):
        r["name"] = name
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", type=Path)
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    ap.add_argument("--include", type=Path, default=ROOT / "include")
    ap.add_argument("--arch", default="90", help="one SM architecture, e.g. 90")
    ap.add_argument("--check", action="store_true", help="apply the budgets; exit 1 on a violation")
    args = ap.parse_args()
    rows = []
    for src in args.sources:
        rows += compile_report(args.nvcc, args.include, args.arch, src if src.is_absolute() else ROOT / src)
    print(f"{'regs':>4} {'stack':>6} {'spill':>6}  kernel")
    for r in rows:
        print(f"{r['regs']:>4} {r['stack']:>6} {r['spill']:>6}  {r['file']}: {r['name'][:150]}")
    if not args.check:
        return 0
    bad = []
    compiled = {Path(src).name for src in args.sources}
    for owner, key, regs, stack, spill in BUDGETS:
        if owner not in compiled:
            continue
        hits = [r for r in rows if key in r["name"]]
        if not hits:
            bad.append(f"no kernel of {owner} matches the budget rule {key!r} (renamed? update "
                       "scripts/ptxas_report.py)")
        for r in hits:
            if r["regs"] > regs or r["stack"] > stack or r["spill"] > spill:
                bad.append(f"{r['name'][:120]}: {r['regs']} registers, {r['stack']} B stack, {r['spill']} B "
                           f"spilled; budget {regs} / {stack} / {spill}")
    for r in rows:
        if r["stack"] > CEILING_STACK:
            bad.append(f"{r['name'][:120]}: {r['stack']} B stack frame (ceiling {CEILING_STACK})")
    for b in bad:
        print("OVER BUDGET:", b)
    print(f"{len(rows)} kernels, {len(bad)} over budget")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
