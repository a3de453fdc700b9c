#!/usr/bin/env bash
# voxaug: the main job. Builds everything if it is missing (scripts/test.sh --setup-only), then
#   1. trains MONAI's Swin UNETR (LibTorch C++, examples/swin_unetr/train.cpp) on synthetic
#      CT-like phantoms with voxaug's BTCV augmentation on the device (RandCropByPosNegLabel,
#      RandFlip x3, RandRotate90, RandShiftIntensity), validates with voxaug's sliding-window
#      inference and a Dice on the device, and writes train.csv, training_curve.png,
#      validation.png and checkpoint.pt (loads into MONAI's SwinUNETR);
#   2. loads that checkpoint into MONAI's SwinUNETR and runs sliding-window inference on the
#      held-out phantoms with voxaug's inferer and MONAI's (examples/swin_unetr/infer.py): Dice per
#      class of both, how far they differ, the time of each;
#   3. runs every voxaug transform, batched, on the Colin27 T1 MRI + AAL atlas (examples/demo.py):
#      montage.png, transforms.png and a timing table;
# and prints a summary. CUDA when a GPU is visible (the real configuration: feature size 48,
# 96^3 x 4 patches, bf16 AMP, 160x160x128 phantoms), else the CPU (a tiny configuration that
# finishes in a few minutes on 2 cores).
#   bash scripts/demo.sh                         # auto device, ./out/demo
#   bash scripts/demo.sh --device cpu --out /tmp/demo --train-steps 60
#   bash scripts/demo.sh --train-only | --augment-only
# Options: --device auto|cpu|cuda, --out DIR, --train-steps N (default cpu 150, cuda the
# trainer's 5000), --train-only, --augment-only; anything after -- goes to the trainer (see
# build/examples/swin_unetr/voxaug_swin_train --help). Environment: PYTHON (default python3),
# VOXAUG_BUILD_DIR (default build), VOXAUG_LIBRARY (use this libvoxaug_torch.so instead).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
build="${VOXAUG_BUILD_DIR:-build}"
[[ "$build" = /* ]] || build="$repo/$build"
lib="${VOXAUG_LIBRARY:-$repo/python/voxaug/lib/libvoxaug_torch.so}"
trainer="$build/examples/swin_unetr/voxaug_swin_train"

device=auto out="$repo/out/demo" steps="" do_train=1 do_augment=1
extra=()
while (($#)); do
  case "$1" in
    --device) device="${2:?--device needs auto, cpu or cuda}"; shift 2 ;;
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    --train-steps) steps="${2:?--train-steps needs a number}"; shift 2 ;;
    --train-only) do_augment=0; shift ;;
    --augment-only) do_train=0; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$device" in auto|cpu|cuda) ;; *) echo "demo.sh: --device must be auto, cpu or cuda, got '$device'" >&2; exit 2 ;; esac
if [[ -n "$steps" && ! "$steps" =~ ^[1-9][0-9]*$ ]]; then
  echo "demo.sh: --train-steps must be a positive integer, got '$steps'" >&2; exit 2
fi

if [[ ! -f "$lib" || ( $do_train == 1 && ! -x "$trainer" ) ]]; then
  echo "demo.sh: build outputs missing; setting up and building with scripts/test.sh --setup-only" >&2
  bash "$repo/scripts/test.sh" --setup-only
  for f in "$lib" "$trainer"; do
    [[ -e "$f" ]] || { echo "demo.sh: scripts/test.sh --setup-only finished but $f is missing" >&2; exit 1; }
  done
fi

# The editable install makes `import voxaug` work anywhere; PYTHONPATH makes the demo work
# without it too (and prefers this checkout over any other installed copy).
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
if [[ "$device" == auto ]]; then
  device=$("$python" -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
fi
mkdir -p "$out"
start=$(date +%s)
summary=()

if ((do_train)); then
  echo "== 1. Swin UNETR training with voxaug augmentation, then sliding-window validation ($device)"
  targs=(--device "$device" --dataset phantom --out "$out/train")
  if [[ "$device" == cpu ]]; then
    # Tiny: 6 training + 2 held-out 48 x 48 x 64 phantoms with 5 classes, 32 x 32 x 64 patches (the
    # smallest a MONAI SwinUNETR takes: at 32^3 its deepest stage is one voxel, which MONAI
    # refuses), feature size 12, a higher learning rate so that a few dozen steps already
    # segment the large organs. 2 threads per op (the CI machine has 2 cores).
    targs+=(--steps "${steps:-150}" --lr 2e-3 --val-every 50 --log-every 10 --threads "$(nproc)"
      --roi 32,32,64 --phantom-size 48,48,64)
  elif [[ -n "$steps" ]]; then
    targs+=(--steps "$steps")
  fi
  t0=$(date +%s)
  "$trainer" "${targs[@]}" "${extra[@]}" | tee "$out/train.log"
  summary+=("training ($device): $(grep -E '^summary:' "$out/train.log" | tail -n 1 | sed 's/^summary: //')")
  summary+=("  wall $(($(date +%s) - t0)) s; outputs in $out/train: train.csv, training_curve.png, validation.png, checkpoint.pt")

  echo
  echo "== 2. sliding-window inference with the checkpoint: voxaug vs MONAI ($device)"
  if ((${#extra[@]})); then
    echo "(skipped: trainer arguments after -- may change the subjects and geometry infer.py regenerates)"
  else
    iargs=(--checkpoint "$out/train/checkpoint.pt" --device "$device")
    if [[ "$device" == cpu ]]; then
      # the CPU run's held-out phantoms (48 x 48 x 64), in its 32 x 32 x 64 windows
      iargs+=(--phantom-size 48,48,64 --roi 32,32,64 --repeats 1)
    else
      iargs+=(--train-subjects 24 --val-subjects 6 --phantom-size 160,160,128 --roi 96,96,96)
    fi
    t0=$(date +%s)
    "$python" "$repo/examples/swin_unetr/infer.py" "${iargs[@]}" | tee "$out/infer.log"
    summary+=("$(grep -E '^inference:' "$out/infer.log" | tail -n 1) -- per-subject Dice in $out/infer.log; wall $(($(date +%s) - t0)) s")
  fi
fi

if ((do_augment)); then
  echo
  echo "== 3. every voxaug transform, batched, on the Colin27 T1 + AAL atlas ($device)"
  t0=$(date +%s)
  if [[ "$device" == cpu ]]; then
    "$python" "$repo/examples/demo.py" --device cpu --batch 4 --repeats 2 --out "$out/augment"
  else
    "$python" "$repo/examples/demo.py" --device "$device" --out "$out/augment"
  fi
  summary+=("augmentation montage ($device): wall $(($(date +%s) - t0)) s; $out/augment/{montage,transforms}.png, timings.json")
fi

echo
echo "== summary ($(date -u '+%Y-%m-%d %H:%M UTC'), $(($(date +%s) - start)) s)"
printf '%s\n' "${summary[@]}"
