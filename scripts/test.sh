#!/usr/bin/env bash
# voxaug: the test command. Installs what is missing (Debian + PyPI), configures and
# builds with ccache, installs the Python package in editable mode, then runs ctest and
# pytest. Idempotent: a second run installs nothing and rebuilds only what changed.
#   bash scripts/test.sh               # set up, build, run every test
#   bash scripts/test.sh --setup-only  # set up and build, no tests (used by the demo)
# Environment: VOXAUG_BUILD_DIR (default build), VOXAUG_CUDA_ARCHS (default 90),
#              VOXAUG_JOBS (default nproc).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
setup_only=0
[[ "${1:-}" == "--setup-only" ]] && setup_only=1
build_dir=${VOXAUG_BUILD_DIR:-build}
jobs=${VOXAUG_JOBS:-$(nproc)}
python=${PYTHON:-python3}

log() { printf '\n== %s\n' "$*"; }

# ---- Debian packages ----
apt_pkgs=(cmake ninja-build ccache g++ libbenchmark-dev libgtest-dev googletest mricron-data
          libnifti2-dev nlohmann-json3-dev libpng-dev zlib1g-dev)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ---- PyPI packages (torch pinned to the GPU machine's version) ----
pip_missing=$("$python" - <<'PY'
import importlib.metadata as md
want = {"torch": "2.11.0", "numpy": None, "scipy": None, "pytest": None, "nibabel": None,
        "monai": None, "torchio": None, "SimpleITK": None, "scikit-image": None, "setuptools": None,
        "wheel": None}
out = []
for name, version in want.items():
    try:
        have = md.version(name)
        if version and have.split("+")[0] != version:
            out.append(f"{name}=={version}")
    except md.PackageNotFoundError:
        out.append(f"{name}=={version}" if version else name)
print(" ".join(out))
PY
)
if [[ -n "$pip_missing" ]]; then
  log "pip install $pip_missing"
  # shellcheck disable=SC2086
  "$python" -m pip install -q $pip_missing
fi

# ---- configure + build ----
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
with_cuda=ON
command -v nvcc >/dev/null 2>&1 || { with_cuda=OFF; echo "nvcc not found: building without the CUDA backend"; }
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
log "configure ($build_dir, CUDA $with_cuda, arch ${VOXAUG_CUDA_ARCHS:-90})"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DVOXAUG_WITH_CUDA=$with_cuda -DCMAKE_CUDA_ARCHITECTURES="${VOXAUG_CUDA_ARCHS:-90}" \
  -DPython3_EXECUTABLE="$(command -v "$python")" "${launcher[@]}" >"$build_dir.configure.log" 2>&1 ||
  { cat "$build_dir.configure.log"; exit 1; }
log "build (-j$jobs)"
cmake --build "$build_dir" -j "$jobs"

# ---- editable install: `import voxaug` from anywhere finds this checkout ----
where=$(cd / && "$python" -c "import voxaug, os; print(os.path.dirname(voxaug.__file__))" 2>/dev/null || true)
if [[ "$where" != "$repo/python/voxaug" ]]; then
  log "pip install -e python"
  "$python" -m pip install -q --no-deps --no-build-isolation -e python
fi
((setup_only)) && exit 0

# ---- tests ----
log "ctest"
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs"
log "pytest"
"$python" -m pytest -q tests/python

# ---- the CPU paths again under AddressSanitizer + UndefinedBehaviorSanitizer ----
if [[ "${VOXAUG_SKIP_SANITIZERS:-0}" != 1 ]]; then
  log "sanitizers (ASan + UBSan, CPU paths)"
  cmake -S . -B "$build_dir-asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVOXAUG_SANITIZE=ON \
    -DVOXAUG_WITH_CUDA=OFF -DVOXAUG_BUILD_TORCH=OFF -DVOXAUG_BUILD_BENCHMARKS=OFF \
    -DVOXAUG_BUILD_EXAMPLES=OFF "${launcher[@]}" >"$build_dir-asan.configure.log" 2>&1 ||
    { cat "$build_dir-asan.configure.log"; exit 1; }
  cmake --build "$build_dir-asan" -j "$jobs" --target voxaug_core_tests
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest --test-dir "$build_dir-asan" --output-on-failure -j "$jobs" -L core
fi
