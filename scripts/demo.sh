#!/usr/bin/env bash
# voxaug: the main job. Builds the ops library if it is missing (scripts/test.sh --setup-only),
# then runs examples/demo.py: every intensity transform, batched, on the Colin27 T1 MRI and
# its AAL atlas, on CUDA when torch sees a GPU, else on the CPU. Prints a timing table and
# writes PNG montages (default ./out/demo).
#   bash scripts/demo.sh                        # auto device, batch 8, ./out/demo
#   bash scripts/demo.sh --device cpu --batch 4 --repeats 5 --out /tmp/demo
# Every argument goes to examples/demo.py (see --help). Environment: PYTHON (default python3),
# VOXAUG_LIBRARY (use this libvoxaug_torch.so instead of the checkout's).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
lib="${VOXAUG_LIBRARY:-$repo/python/voxaug/lib/libvoxaug_torch.so}"

if [[ ! -f "$lib" ]]; then
  echo "demo.sh: $lib not found; setting up and building with scripts/test.sh --setup-only" >&2
  if [[ ! -f "$repo/scripts/test.sh" ]]; then
    echo "demo.sh: $repo/scripts/test.sh is missing; cannot build the ops library" >&2
    exit 1
  fi
  bash "$repo/scripts/test.sh" --setup-only
  if [[ ! -f "$lib" ]]; then
    echo "demo.sh: scripts/test.sh --setup-only finished but $lib is still missing" >&2
    exit 1
  fi
fi

# The editable install makes `import voxaug` work anywhere; PYTHONPATH makes the demo work
# without it too (and prefers this checkout over any other installed copy).
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" "$repo/examples/demo.py" "$@"
