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
# PyPI's google-benchmark sdists hold only the Python bindings (no C++ sources), so they are
# no use here. A missing piece is reported and skipped; device_check.sh then says what it
# could not run. Usage: bash scripts/prepare_device_bundle.sh
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

say "third_party is $(du -sh "$TP" | cut -f1) (carry limit 64 MiB)"
exit $missing
