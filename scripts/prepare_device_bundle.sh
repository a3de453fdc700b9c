#!/usr/bin/env bash
# Fills the git-ignored third_party/ folder with what scripts/device_check.sh needs on a GPU
# machine that has no network: run it here (with network), then carry third_party/ along.
#
#   third_party/googletest          copy of /usr/src/googletest (Debian googletest)
#   third_party/benchmark           Google Benchmark sources: the upstream tarball of Debian's
#                                   `benchmark` source package (apt-get source, run with a
#                                   private apt configuration; the system's is not touched), or
#                                   $VOXAUG_BENCHMARK_SRC (a source folder or a .tar.gz) when set
#   third_party/wheels/*.whl        monai (pure Python), for `pip install --no-index --no-deps`
#   third_party/wheels/fallback/    numpy for CPython 3.12, installed by device_check.sh only
#                                   when the machine has no numpy
#
#   third_party/prebuilt.tar.gz     with --prebuilt [BUILD_DIR] only: the CUDA build (sm_90,
#                                   Release) of this tree, made here: the ops library, the test
#                                   and benchmark binaries, ctest's files, libbenchmark, and the
#                                   sha256 of every source it was built from. device_check.sh
#                                   uses it instead of its cold build (~280 s of a 600 s call on
#                                   the H200) when the sources there are the same, and builds
#                                   from source when they are not or the binaries do not load.
#
# PyPI's google-benchmark sdists hold only the Python bindings (no C++ sources), so they are
# no use here. A missing piece is reported and skipped; device_check.sh then says what it
# could not run.
#
#   bash scripts/prepare_device_bundle.sh                      sources and wheels
#   bash scripts/prepare_device_bundle.sh --prebuilt [DIR]     also the prebuilt CUDA build:
#                                                              DIR (default build-device) is
#                                                              configured and built first (a
#                                                              CUDA build on 2 cores takes a
#                                                              while; ./build is reused as is
#                                                              when it is a CUDA sm_90 build)
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TP="$ROOT/third_party"
GTEST_SRC="${VOXAUG_GTEST_SRC:-/usr/src/googletest}"
DEVICE_PY="${VOXAUG_DEVICE_PYTHON_VERSION:-3.12}"
missing=0

say() { printf '[prepare] %s\n' "$*"; }

mkdir -p "$TP"

# ---- GoogleTest ----
if [[ -f "$GTEST_SRC/CMakeLists.txt" ]]; then
  rm -rf "$TP/googletest"
  cp -a "$GTEST_SRC" "$TP/googletest"
  say "googletest: copied $GTEST_SRC"
else
  say "googletest: $GTEST_SRC not found (apt-get install googletest): SKIPPED"
  missing=1
fi

# ---- Google Benchmark ----
unpack_benchmark() {  # <tar.gz>
  local tmp
  tmp="$(mktemp -d)"
  if tar xzf "$1" -C "$tmp" --strip-components=1 && [[ -f "$tmp/CMakeLists.txt" ]]; then
    rm -rf "$TP/benchmark"
    mv "$tmp" "$TP/benchmark"
    return 0
  fi
  rm -rf "$tmp"
  return 1
}

benchmark_from_debian() {
  local work codename rc=1
  work="$(mktemp -d)"
  # shellcheck disable=SC1091
  codename="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
  if [[ -z "$codename" ]] || ! command -v apt-get >/dev/null; then
    rm -rf "$work"
    return 1
  fi
  mkdir -p "$work/lists/partial" "$work/src"
  echo "deb-src http://deb.debian.org/debian $codename main" >"$work/sources.list"
  local apt=(apt-get -q -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
             -o "Dir::State::Lists=$work/lists")
  if "${apt[@]}" update >"$work/apt.log" 2>&1 &&
     (cd "$work/src" && "${apt[@]}" source --download-only benchmark >>"$work/apt.log" 2>&1); then
    local orig
    orig="$(compgen -G "$work/src/benchmark_*.orig.tar.gz" | head -n 1)"
    if [[ -n "$orig" ]] && unpack_benchmark "$orig"; then
      say "benchmark: unpacked $(basename "$orig") (Debian $codename source package)"
      rc=0
    fi
  fi
  [[ $rc -eq 0 ]] || sed 's/^/[prepare]   apt: /' "$work/apt.log" | tail -n 5
  rm -rf "$work"
  return $rc
}

if [[ -n "${VOXAUG_BENCHMARK_SRC:-}" ]]; then
  if [[ -f "$VOXAUG_BENCHMARK_SRC/CMakeLists.txt" ]]; then
    rm -rf "$TP/benchmark"
    cp -a "$VOXAUG_BENCHMARK_SRC" "$TP/benchmark"
    rm -rf "$TP/benchmark/.git"
    say "benchmark: copied $VOXAUG_BENCHMARK_SRC"
  elif [[ -f "$VOXAUG_BENCHMARK_SRC" ]] && unpack_benchmark "$VOXAUG_BENCHMARK_SRC"; then
    say "benchmark: unpacked $VOXAUG_BENCHMARK_SRC"
  else
    say "benchmark: VOXAUG_BENCHMARK_SRC=$VOXAUG_BENCHMARK_SRC is neither a source folder nor a .tar.gz: SKIPPED"
    missing=1
  fi
elif ! benchmark_from_debian; then
  say "benchmark: no sources (set VOXAUG_BENCHMARK_SRC to a google/benchmark checkout or tarball);" \
      "device_check.sh will skip the benchmarks: SKIPPED"
  missing=1
fi

# ---- wheels ----
mkdir -p "$TP/wheels/fallback"
if python3 -m pip download --quiet --no-deps monai -d "$TP/wheels"; then
  say "wheels:" "$TP"/wheels/monai-*.whl
else
  say "wheels: pip download monai failed: SKIPPED"
  missing=1
fi
if python3 -m pip download --quiet --no-deps --only-binary=:all: --implementation cp \
     --python-version "$DEVICE_PY" --platform manylinux_2_28_x86_64 numpy -d "$TP/wheels/fallback"; then
  say "wheels: fallback" "$TP"/wheels/fallback/numpy-*.whl
else
  say "wheels: pip download numpy (cp${DEVICE_PY/./}) failed: SKIPPED"
  missing=1
fi

# ---- prebuilt CUDA build (--prebuilt) ----
PREBUILT=0 PREBUILT_DIR="$ROOT/build-device"
if [[ "${1:-}" == --prebuilt ]]; then
  PREBUILT=1
  [[ -n "${2:-}" ]] && PREBUILT_DIR="$(cd "$ROOT" && mkdir -p "$2" && cd "$2" && pwd)"
fi

# The files device_check.sh needs from a build (relative to it), one per line.
prebuilt_files() {  # <build dir>
  (cd "$1" && {
    ls libvoxaug_torch.so tests/voxaug_core_tests tests/voxaug_torch_tests tests/lib*_shim.so \
       examples/swin_unetr/voxaug_swin_train 2>/dev/null
    find benchmarks -maxdepth 1 -type f -name 'voxaug_bench_*' -perm -u+x 2>/dev/null
    find . -name CTestTestfile.cmake -not -path './_deps/*' -not -path './tests/consumer_work/*' | sed 's#^\./##'
    ls tests/*_include.cmake tests/*_tests.cmake 2>/dev/null
  })
}

# Every file whose content can change the binaries, as sha256sum lines relative to ROOT
# (tracked and untracked-not-ignored: what the device machine receives).
prebuilt_sources() {
  (cd "$ROOT" && git ls-files --cached --others --exclude-standard -- CMakeLists.txt cmake include \
     kernels torch_ext tests benchmarks examples |
     grep -vE '\.(py|md|txt)$|^tests/python/|^tests/data/' | grep -v '^$' |
     while read -r f; do [[ -f "$f" ]] && printf '%s\n' "$f"; done | LC_ALL=C sort |
     xargs -d '\n' sha256sum)
  # CMakeLists.txt files are sources too (the filter above dropped *.txt).
  (cd "$ROOT" && git ls-files --cached --others --exclude-standard | grep -E '(^|/)CMakeLists\.txt$' |
     LC_ALL=C sort | xargs -d '\n' sha256sum)
}

pack_prebuilt() {
  local b=$PREBUILT_DIR stage cache_ok=0
  if [[ -f "$b/CMakeCache.txt" ]] && grep -q '^VOXAUG_WITH_CUDA:BOOL=ON' "$b/CMakeCache.txt" &&
     grep -q '^CMAKE_CUDA_ARCHITECTURES:STRING=90$' "$b/CMakeCache.txt"; then cache_ok=1; fi
  if ! command -v nvcc >/dev/null && [[ $cache_ok == 0 ]]; then
    say "prebuilt: no nvcc and no configured CUDA build in $b: SKIPPED"; return 1
  fi
  local launcher=()
  command -v ccache >/dev/null &&
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  say "prebuilt: configuring and building $b (CUDA, sm_90, Release)"
  if ! cmake -S "$ROOT" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
       -DVOXAUG_WITH_CUDA=ON -DVOXAUG_BUILD_TORCH=ON -DVOXAUG_BUILD_TESTS=ON -DVOXAUG_BUILD_BENCHMARKS=ON \
       "${launcher[@]}" >"$TP/prebuilt.build.log" 2>&1 ||
     ! cmake --build "$b" -j "$(nproc)" >>"$TP/prebuilt.build.log" 2>&1; then
    say "prebuilt: build failed (third_party/prebuilt.build.log): SKIPPED"; tail -n 15 "$TP/prebuilt.build.log"
    return 1
  fi
  stage="$(mktemp -d)"
  local f n=0
  while read -r f; do
    mkdir -p "$stage/$(dirname "$f")"
    cp -a "$b/$f" "$stage/$f"
    # Host symbols only (the CUDA fatbins stay); the ops library keeps its dynamic ones.
    if head -c 4 "$stage/$f" | grep -q ELF; then strip --strip-unneeded "$stage/$f"; fi
    n=$((n + 1))
  done < <(prebuilt_files "$b")
  # libbenchmark is not on the device (the benchmarks link Debian's shared one).
  mkdir -p "$stage/lib"
  local bench lib
  bench="$(compgen -G "$b/benchmarks/voxaug_bench_*" | head -n 1)"
  if [[ -n "$bench" ]]; then
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done < <(ldd "$bench" | awk '/libbenchmark/ {print $3}')
  fi
  mkdir -p "$stage/.prebuilt"
  prebuilt_sources >"$stage/.prebuilt/SOURCES.sha256"
  printf '%s\n%s\n' "$ROOT" "$b" >"$stage/.prebuilt/PATHS"
  {
    # shellcheck disable=SC1091
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"))"
    echo "commit $(git -C "$ROOT" rev-parse --short HEAD) ($(git -C "$ROOT" status --porcelain | wc -l) uncommitted paths)"
    echo "$(nvcc --version 2>/dev/null | tail -n 1); $(c++ --version | head -n 1)"
    echo "torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  } >"$stage/.prebuilt/INFO"
  rm -f "$TP/prebuilt.tar.gz"
  tar czf "$TP/prebuilt.tar.gz" -C "$stage" . && rm -rf "$stage"
  say "prebuilt: $n files, $(du -h "$TP/prebuilt.tar.gz" | cut -f1)" \
      "(third_party/prebuilt.tar.gz; sources hashed: $(tar xzf "$TP/prebuilt.tar.gz" -O ./.prebuilt/SOURCES.sha256 | wc -l))"
}

if [[ $PREBUILT == 1 ]]; then
  pack_prebuilt || missing=1
else
  rm -f "$TP/prebuilt.tar.gz"  # never carry a build of other sources by accident
fi

say "third_party is $(du -sh "$TP" | cut -f1) (carry limit 64 MiB)"
exit $missing
