#!/usr/bin/env bash
# shellcheck disable=SC2317  # the step functions are called through run_step "$fn"
# The one prepared check for a GPU machine (H200, no network, minutes of budget): build
# everything, run the C++ and Python tests (CUDA compared against the CPU twin), run
# compute-sanitizer on the CUDA tests, benchmark the kernels, and print a summary table last.
#
#   bash scripts/device_check.sh                                  full run, needs a GPU
#   VOXAUG_DEVICE_CHECK_CPU_ONLY=1 bash scripts/device_check.sh   same steps minus the CUDA ones
#                                                                 (dry run on a machine without GPU)
#
# Run from anywhere; works in the repository root. Needs third_party/ as filled by
# scripts/prepare_device_bundle.sh (GoogleTest and Google Benchmark sources, wheels): the
# device has neither library installed and no network. With `prepare_device_bundle.sh
# --prebuilt`, third_party/prebuilt.tar.gz holds a CUDA build of the same sources made on the
# developer's machine: the prebuilt step checks every source's sha256 against it, unpacks it
# into the build folder and checks that its binaries load (torch's libraries on
# LD_LIBRARY_PATH); then deps and build have nothing to do. Otherwise (stale, absent, or not
# loading) the tree is built here as before. Logs and results go to $OUT
# (default ./out/device_check). Every step has its own time limit inside an overall budget;
# a failing step does not stop the others.
#
# Environment: OUT, VOXAUG_DEVICE_CHECK_CPU_ONLY (0/1), VOXAUG_DEVICE_CHECK_BUDGET_S (overall
# seconds, default 560; 3600 in CPU-only mode), VOXAUG_DEVICE_CHECK_BUILD_DIR (default ./build),
# VOXAUG_CUDA_ARCHITECTURES (default 90), VOXAUG_BENCH_FILTER, VOXAUG_BENCH_RESAMPLE_FILTER,
# VOXAUG_RACECHECK_FILTER, VOXAUG_DEVICE_CHECK_STEPS (see the run section),
# VOXAUG_DEVICE_PREBUILT (1 default: use third_party/prebuilt.tar.gz when it matches; 0: build),
# VOXAUG_DEVICE_PYTEST_K (pytest -k selection, default cuda), VOXAUG_DEVICE_PYTEST_WORKERS
# (pytest-xdist workers when it is installed, default 6), VOXAUG_DEVICE_CTEST_DIRECT, PYTHON.
#
# Exit status: 0 all steps passed or were skipped for a stated reason, 1 a step failed,
# 2 no step failed but some were not run because the time budget ran out.
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1

CPU_ONLY="${VOXAUG_DEVICE_CHECK_CPU_ONLY:-0}"
[[ "$CPU_ONLY" == 1 || "$CPU_ONLY" == true ]] && CPU_ONLY=1 || CPU_ONLY=0
OUT="${OUT:-$ROOT/out/device_check}"
mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)"
BUILD="${VOXAUG_DEVICE_CHECK_BUILD_DIR:-$ROOT/build}"
DEPS="$BUILD/_deps"
PREFIX="$DEPS/prefix"
PY="${PYTHON:-python3}"
JOBS="$(nproc)"
CUDA_ARCHS="${VOXAUG_CUDA_ARCHITECTURES:-90}"
RACECHECK_FILTER="${VOXAUG_RACECHECK_FILTER:-IntensityCuda.LargeBatchTwinBitIdentical:FilterCuda.Float32TwinBitIdentical}"
if [[ $CPU_ONLY == 1 ]]; then
  BUDGET="${VOXAUG_DEVICE_CHECK_BUDGET_S:-3600}"
  CAP_SCALE=6  # two slow cores instead of sixteen
  BENCH_FILTER="${VOXAUG_BENCH_FILTER:-^cpu/chain/}"
  BENCH_MIN_TIME=0.05
  # The 4 x 96^3 image+label key case and small forward/backward cases: seconds on 2 cores.
  BENCH_RESAMPLE_FILTER="${VOXAUG_BENCH_RESAMPLE_FILTER:-^cpu/(image_label(_elastic)?/4x1x96x96x96|(linear|backward_input|backward_matrix)/1x1x64x64x64)/}"
  DEVICE=cpu
else
  # The first call on a fresh machine is a cold build: ~280-300 s on the H200 machine's 16
  # cores (2026-12-04), most of it one object (kernels/intensity/intensity.cpp, ~270 s; since
  # split into kernels/intensity/cpu/*.cpp, and the resample gather into kernels/resample/cpu/).
  # ./build stays on a warm machine between calls (a second call rebuilt 15 of 87 targets).
  # 560 s fits one 600 s call.
  BUDGET="${VOXAUG_DEVICE_CHECK_BUDGET_S:-560}"
  CAP_SCALE=1
  BENCH_FILTER="${VOXAUG_BENCH_FILTER:-^cuda/}"
  BENCH_MIN_TIME=0.2
  BENCH_RESAMPLE_FILTER="${VOXAUG_BENCH_RESAMPLE_FILTER:-^cuda/}"
  DEVICE=cuda
fi
# The resample benchmark times 8 calls per iteration: 0.05 s each keeps its ~60 CUDA cases
# to roughly 20 s; the bench step keeps this much of its time for it.
BENCH_RESAMPLE_MIN_TIME=0.05
BENCH_RESAMPLE_RESERVE_S=45
DEADLINE=$((SECONDS + BUDGET))

# nvcc and compute-sanitizer live in the toolkit's bin/, which is not always on PATH.
for d in "${CUDA_HOME:-}" /usr/local/cuda; do
  if [[ -n "$d" && -x "$d/bin/nvcc" ]] && ! command -v nvcc >/dev/null; then PATH="$d/bin:$PATH"; fi
done
SANITIZER="$(command -v compute-sanitizer || true)"
[[ -z "$SANITIZER" && -x /usr/local/cuda/compute-sanitizer/compute-sanitizer ]] &&
  SANITIZER=/usr/local/cuda/compute-sanitizer/compute-sanitizer
# Wheels from the bundle go here (not into the system site-packages); `import voxaug` works
# from the source tree.
PYDEPS="$DEPS/pydeps"
export PYTHONPATH="$ROOT/python:$PYDEPS${PYTHONPATH:+:$PYTHONPATH}"

# ---------------------------------------------------------------- step machinery
NAMES=() STATUSES=() TIMES=() KEYS=()
INCOMPLETE=0
STEP_STATUS=PASS STEP_KEY="" STEP_END=0
HAVE_BENCHMARK=0
PREBUILT_OK=0

log() { printf '[device_check] %s\n' "$*"; }
step_left() { echo $((STEP_END - SECONDS)); }
fail() { STEP_STATUS=FAIL; STEP_KEY="$*"; }
skip() { STEP_STATUS=SKIP; STEP_KEY="$*"; }
show_tail() { [[ -f "$1" ]] && tail -n "${2:-15}" "$1" | sed 's/^/    | /'; }

# tmo <log> <cmd...>: runs cmd under the step's remaining time, output appended to <log>.
# Returns cmd's status; 124 means it ran out of time.
tmo() {
  local logf=$1 left
  shift
  left=$(step_left)
  if ((left <= 0)); then
    echo "[device_check] not started, step time limit reached: $*" >>"$logf"
    return 124
  fi
  echo "[device_check] \$ $*" >>"$logf"
  timeout --kill-after=10 "$left" "$@" >>"$logf" 2>&1
  local rc=$?
  ((rc == 137)) && rc=124
  ((rc == 124)) && echo "[device_check] TIMEOUT after ${left}s: $*" >>"$logf"
  return "$rc"
}

# run_step <name> <limit_s> <function>: the limit is scaled in CPU-only mode and clipped to
# what is left of the overall budget.
run_step() {
  local name=$1 cap=$(($2 * CAP_SCALE)) fn=$3 start left
  left=$((DEADLINE - SECONDS - 5))
  ((cap < left)) && left=$cap
  if ((left < 10)); then
    NAMES+=("$name") STATUSES+=(SKIP) TIMES+=(0) KEYS+=("not run: time budget exhausted")
    INCOMPLETE=1
    log "$name: not run, time budget exhausted"
    return
  fi
  STEP_STATUS=PASS STEP_KEY="" STEP_END=$((SECONDS + left)) start=$SECONDS
  log "$name: start (limit ${left}s)"
  "$fn"
  NAMES+=("$name") STATUSES+=("$STEP_STATUS") TIMES+=($((SECONDS - start))) KEYS+=("$STEP_KEY")
  log "$name: $STEP_STATUS in $((SECONDS - start))s${STEP_KEY:+ -- $STEP_KEY}"
}

# junit_counts <xml>: "passed failed skipped total" from a JUnit file (ctest or pytest).
junit_counts() {
  "$PY" - "$1" <<'EOF'
import sys, xml.etree.ElementTree as ET
try:
    cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
except Exception:
    print("0 0 0 0"); sys.exit()
failed = sum(1 for c in cases if c.find("failure") is not None or c.find("error") is not None)
skipped = sum(1 for c in cases if c.find("skipped") is not None
              or c.get("status") in ("notrun", "disabled"))
print(len(cases) - failed - skipped, failed, skipped, len(cases))
EOF
}

# ---------------------------------------------------------------- 1. environment
step_env() {
  local f="$OUT/env.txt"
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "mode: $([[ $CPU_ONLY == 1 ]] && echo cpu-only || echo full)"
    echo "host: $(uname -srm), $(nproc) cores, $(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
    echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
         "($(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) uncommitted paths)"
    echo "--- nvidia-smi -L"
    timeout 20 nvidia-smi -L 2>&1 || echo "nvidia-smi: not available"
    timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
      --format=csv 2>&1 || true
    echo "--- nvcc --version"
    timeout 20 nvcc --version 2>&1 || echo "nvcc: not found"
    echo "--- compute-sanitizer: ${SANITIZER:-not found}"
    [[ -n "$SANITIZER" ]] && timeout 20 "$SANITIZER" --version 2>&1 | tail -n 2
    echo "--- tools"
    cmake --version 2>&1 | head -n 1
    echo "ninja $(ninja --version 2>&1)"
    c++ --version 2>&1 | head -n 1
    echo "--- python"
    timeout 60 "$PY" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "devices", torch.cuda.device_count())' 2>&1
    timeout 60 "$PY" -c 'import pytest, numpy; print("pytest", pytest.__version__, "numpy", numpy.__version__)' 2>&1
  } >"$f" 2>&1
  local gpu torch
  gpu="$(grep -m1 '^GPU 0' "$f" | sed 's/ (UUID.*//; s/^GPU 0: //')"
  torch="$(grep -m1 '^torch ' "$f")"
  STEP_KEY="${gpu:-no GPU}; ${torch:-torch not importable}"
  if [[ -z "$torch" ]]; then
    fail "torch not importable by $PY"
  elif [[ $CPU_ONLY == 0 ]] && ! grep -q 'available True' <<<"$torch"; then
    fail "${gpu:-no GPU}; torch sees no CUDA device"
  fi
}

# ---------------------------------------------------------------- 1b. prebuilt binaries
# third_party/prebuilt.tar.gz (prepare_device_bundle.sh --prebuilt): unpacked into a staging
# folder, used only if every hashed source is the same here and its binaries load; then its
# files move into $BUILD with ctest's absolute paths rewritten to this machine's.
step_prebuilt() {
  local tgz="$ROOT/third_party/prebuilt.tar.gz" logf="$OUT/prebuilt.log" stage="$DEPS/prebuilt-stage"
  : >"$logf"
  if [[ "${VOXAUG_DEVICE_PREBUILT:-1}" == 0 ]]; then skip "VOXAUG_DEVICE_PREBUILT=0: building here"; return; fi
  if [[ ! -f "$tgz" ]]; then skip "no third_party/prebuilt.tar.gz: building here"; return; fi
  rm -rf "$stage" && mkdir -p "$stage"
  if ! tmo "$logf" tar xzf "$tgz" -C "$stage"; then fail "unpacking prebuilt.tar.gz failed: building here"; return; fi
  local differ
  differ="$( (cd "$ROOT" && sha256sum -c "$stage/.prebuilt/SOURCES.sha256" 2>&1) | grep -c ': FAILED')"
  if ((differ > 0)); then
    (cd "$ROOT" && sha256sum -c "$stage/.prebuilt/SOURCES.sha256" 2>&1) | grep -v ': OK$' | head -n 20 >>"$logf"
    rm -rf "$stage"
    skip "prebuilt is stale ($differ sources differ, prebuilt.log): building here"; return
  fi
  # torch's own libraries (and the CUDA runtime wheels beside it), then the bundled ones.
  local tdir paths=("$BUILD/lib") d
  tdir="$(timeout 60 "$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>>"$logf")"
  [[ -n "$tdir" ]] && paths+=("$tdir/lib")
  for d in "$tdir"/../nvidia/cu13/lib "$tdir"/../nvidia/*/lib /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    [[ -n "$tdir" && -d "$d" ]] && paths+=("$(cd "$d" && pwd)")
  done
  local joined
  joined="$(printf '%s:' "${paths[@]}")"
  export LD_LIBRARY_PATH="${joined%:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >>"$logf"
  # Load checks from the staging folder (nothing in $BUILD yet, so a failure leaves a clean build).
  local ok=1
  LD_LIBRARY_PATH="$stage/lib:$LD_LIBRARY_PATH" tmo "$logf" "$stage/tests/voxaug_core_tests" --gtest_list_tests \
    >/dev/null || ok=0
  VOXAUG_LIBRARY="$stage/libvoxaug_torch.so" tmo "$logf" "$PY" -c \
    'import torch, voxaug; print("voxaug ops:", len([n for n in dir(torch.ops.voxaug)]))' || ok=0
  if ((ok == 0)); then
    rm -rf "$stage"
    fail "prebuilt binaries do not load here (prebuilt.log): building here"; return
  fi
  local old_root old_build
  { read -r old_root; read -r old_build; } <"$stage/.prebuilt/PATHS"
  mkdir -p "$BUILD"
  local f
  while read -r f; do
    mkdir -p "$BUILD/$(dirname "$f")" && mv -f "$stage/$f" "$BUILD/$f"
    # ctest's files name the build and source folders of the machine that made them.
    [[ $f == *.cmake ]] && sed -i -e "s#${old_build}#${BUILD}#g" -e "s#${old_root}#${ROOT}#g" "$BUILD/$f"
  done < <(cd "$stage" && find . -type f -not -path './.prebuilt/*' | sed 's#^\./##')
  mkdir -p "$ROOT/python/voxaug/lib" && cp -f "$BUILD/libvoxaug_torch.so" "$ROOT/python/voxaug/lib/"
  compgen -G "$BUILD/benchmarks/voxaug_bench_*" >/dev/null && HAVE_BENCHMARK=1
  PREBUILT_OK=1
  STEP_KEY="$(head -n 2 "$stage/.prebuilt/INFO" | paste -sd ';' -)"
  rm -rf "$stage"
}

# ---------------------------------------------------------------- 2. third-party libraries
# Builds GoogleTest and Google Benchmark from third_party/ into $PREFIX (once; a stamp marks
# it done) and installs the bundled wheels the machine lacks into $PYDEPS.
build_dep() {  # <name> <source> <cmake args...>
  local name=$1 src=$2 logf="$OUT/deps.log"
  shift 2
  [[ -f "$PREFIX/.$name.stamp" ]] && return 0
  # GIT_DIR: benchmark's CMake asks git for its version; it must not touch our repository.
  GIT_DIR=/nonexistent tmo "$logf" cmake -S "$src" -B "$DEPS/$name" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_LIBDIR=lib \
      -DCMAKE_POSITION_INDEPENDENT_CODE=ON "$@" &&
    tmo "$logf" cmake --build "$DEPS/$name" -j "$JOBS" &&
    tmo "$logf" cmake --install "$DEPS/$name" &&
    touch "$PREFIX/.$name.stamp"
}

step_deps() {
  local notes=() logf="$OUT/deps.log"
  : >"$logf"
  mkdir -p "$PREFIX"
  if [[ $PREBUILT_OK == 1 ]]; then
    notes+=("prebuilt: no C++ libraries to build")
  elif [[ -f third_party/googletest/CMakeLists.txt ]]; then
    if build_dep googletest third_party/googletest; then notes+=("gtest ok"); else
      fail "GoogleTest build failed (deps.log)"; show_tail "$logf"; return; fi
  else
    notes+=("no third_party/googletest: system GTest or none")
  fi
  if [[ $PREBUILT_OK == 1 ]]; then
    :
  elif [[ -f third_party/benchmark/CMakeLists.txt ]]; then
    if build_dep benchmark third_party/benchmark -DBENCHMARK_ENABLE_TESTING=OFF \
         -DBENCHMARK_ENABLE_GTEST_TESTS=OFF -DBENCHMARK_ENABLE_WERROR=OFF -DBENCHMARK_INSTALL_DOCS=OFF; then
      HAVE_BENCHMARK=1
      notes+=("benchmark ok")
    else
      fail "Google Benchmark build failed (deps.log)"; show_tail "$logf"; return
    fi
  elif compgen -G "/usr/lib/*/cmake/benchmark/benchmarkConfig.cmake" >/dev/null ||
       compgen -G "/usr/local/lib*/cmake/benchmark/benchmarkConfig.cmake" >/dev/null; then
    HAVE_BENCHMARK=1
    notes+=("system benchmark")
  else
    notes+=("no Google Benchmark sources (third_party/benchmark): benchmarks not built")
  fi
  local mod
  for mod in numpy monai; do
    if timeout 60 "$PY" -c "import $mod" >/dev/null 2>&1; then continue; fi
    local wheels=()
    [[ $mod == numpy ]] && mapfile -t wheels < <(compgen -G "third_party/wheels/fallback/numpy-*.whl")
    [[ $mod == monai ]] && mapfile -t wheels < <(compgen -G "third_party/wheels/monai-*.whl")
    if ((${#wheels[@]} == 0)); then notes+=("no $mod"); continue; fi
    if tmo "$logf" "$PY" -m pip install --no-index --no-deps --upgrade --target "$PYDEPS" "${wheels[@]}"; then
      notes+=("$mod from wheel")
    else
      notes+=("$mod wheel install failed")
    fi
  done
  local joined
  joined="$(printf '%s, ' "${notes[@]}")"
  STEP_KEY="${joined%, }"
}

# ---------------------------------------------------------------- 3. configure + build
step_build() {
  local logf="$OUT/build.log" launcher=()
  if [[ $PREBUILT_OK == 1 ]]; then STEP_KEY="prebuilt binaries in use (step prebuilt)"; return 0; fi
  : >"$logf"
  command -v ccache >/dev/null &&
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  if ! tmo "$logf" cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
       -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" -DVOXAUG_WITH_CUDA=ON -DVOXAUG_BUILD_TORCH=ON \
       -DVOXAUG_BUILD_TESTS=ON -DVOXAUG_BUILD_BENCHMARKS="$([[ $HAVE_BENCHMARK == 1 ]] && echo ON || echo OFF)" \
       -DCMAKE_PREFIX_PATH="$PREFIX" -DPython3_EXECUTABLE="$(command -v "$PY")" "${launcher[@]}"; then
    fail "configure failed (build.log)"; show_tail "$logf" 25; return
  fi
  # -k 0: build every target that can be built, so one broken piece does not hide the rest.
  local rc=0
  tmo "$logf" cmake --build "$BUILD" -j "$JOBS" -- -k 0 || rc=$?
  local warnings
  warnings="$(grep -c 'warning:' "$logf")"
  if ((rc == 124)); then
    fail "build timed out, $warnings warnings"
  elif ((rc != 0)); then
    fail "build failed: $(grep -c '^FAILED:' "$logf") targets, $warnings warnings (build.log)"
    grep -m 20 -E '^FAILED:|error' "$logf" | sed 's/^/    | /'
  else
    STEP_KEY="$warnings compiler warnings"
    ((warnings > 0)) && grep -m 10 'warning:' "$logf" | sed 's/^/    | /'
  fi
  return 0
}

# ---------------------------------------------------------------- 4. ctest
# With a GPU, the CUDA tests first run as two processes (the core and the torch gtest binaries,
# side by side, --gtest_filter='*Cuda*', the tests ctest -R Cuda selects): one CUDA and LibTorch
# start-up each instead of one per test (ctest took 99 s for 168 tests on the H200, mostly
# start-ups). A binary that dies mid-run (a signal, no XML) loses its later tests, so then
# ctest runs the selection again, one process per test. VOXAUG_DEVICE_CTEST_DIRECT=0: ctest only.
gtest_direct() {
  local logf=$1 pids=() rcs=() b i rc
  for b in core torch; do
    [[ -x "$BUILD/tests/voxaug_${b}_tests" ]] || return 1
    rm -f "$OUT/gtest_$b.xml"
    tmo "$OUT/gtest_$b.log" "$BUILD/tests/voxaug_${b}_tests" --gtest_filter='*Cuda*' \
      --gtest_output="xml:$OUT/gtest_$b.xml" &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    rc=0; wait "${pids[$i]}" || rc=$?; rcs+=("$rc")
  done
  cat "$OUT/gtest_core.log" "$OUT/gtest_torch.log" >>"$logf" 2>/dev/null
  for i in 0 1; do
    # 0: all passed, 1: some failed; anything else (a signal, a timeout) lost tests.
    if ((rcs[i] > 1)) || [[ ! -s "$OUT/gtest_$([[ $i == 0 ]] && echo core || echo torch).xml" ]]; then
      echo "[device_check] gtest binary $i exit ${rcs[$i]}: per-test ctest follows" >>"$logf"
      return 1
    fi
  done
  return 0
}

step_ctest() {
  local logf="$OUT/ctest.log" xml="$OUT/ctest.xml" rc=0
  : >"$logf"
  rm -f "$xml"
  if [[ $CPU_ONLY == 0 && "${VOXAUG_DEVICE_CTEST_DIRECT:-1}" == 1 ]] && gtest_direct "$logf"; then
    local p1 f1 s1 n1 p2 f2 s2 n2
    read -r p1 f1 s1 n1 < <(junit_counts "$OUT/gtest_core.xml")
    read -r p2 f2 s2 n2 < <(junit_counts "$OUT/gtest_torch.xml")
    STEP_KEY="$((p1 + p2)) passed, $((f1 + f2)) failed, $((s1 + s2)) skipped of $((n1 + n2)) (two gtest processes)"
    if ((f1 + f2 > 0 || n1 + n2 == 0)); then
      fail "$STEP_KEY"; grep -E '^\[  FAILED  \]' "$logf" | sort -u | head -n 20 | sed 's/^/    | /'
    elif ((s1 + s2 > 0)); then
      fail "$STEP_KEY; CUDA tests skipped: no device seen by the tests"
    fi
    return 0
  fi
  # With a GPU only the CUDA tests (names with "Cuda"): CI runs the CPU ones on every commit.
  local sel=()
  [[ $CPU_ONLY == 0 ]] && sel=(-R Cuda)
  tmo "$logf" ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" --timeout 240 \
    --output-junit "$xml" "${sel[@]}" || rc=$?
  local p f s n
  read -r p f s n < <(junit_counts "$xml")
  STEP_KEY="$p passed, $f failed, $s skipped of $n"
  if ((rc == 124)); then fail "timed out; $STEP_KEY"
  elif ((rc != 0 || f > 0 || n == 0)); then fail "$STEP_KEY (ctest exit $rc)"; show_tail "$logf" 20
  fi
  # With a GPU, a skipped CUDA test means the device was not seen.
  if [[ $CPU_ONLY == 0 && $STEP_STATUS == PASS ]] && grep -q 'Cuda\.[A-Za-z]*.*(Skipped)' "$logf"; then
    fail "$STEP_KEY; CUDA tests skipped: no device seen by the tests"
  fi
  return 0
}

# ---------------------------------------------------------------- 5. pytest
step_pytest() {
  local logf="$OUT/pytest.log" xml="$OUT/pytest.xml" rc=0
  if [[ ! -d tests/python ]]; then skip "no tests/python"; return; fi
  : >"$logf"
  rm -f "$xml"
  # The CUDA cases only (their ids hold "cuda"; the CPU ones ran in CI): the whole suite does
  # not fit the step's budget. VOXAUG_DEVICE_PYTEST_K overrides the selection ("" = all).
  local sel=(-k "${VOXAUG_DEVICE_PYTEST_K-cuda}")
  [[ -z "${VOXAUG_DEVICE_PYTEST_K-cuda}" ]] && sel=()
  # pytest-xdist (in the GPU machine's image): several worker processes share the GPU, each
  # with its own CUDA context (~380 CUDA cases; one process does not fit the step's limit).
  local workers="${VOXAUG_DEVICE_PYTEST_WORKERS:-6}"
  if ((workers > 1)) && timeout 60 "$PY" -c 'import xdist' >/dev/null 2>&1; then sel+=(-n "$workers"); fi
  tmo "$logf" "$PY" -m pytest tests/python -q -rs -p no:cacheprovider --junitxml="$xml" "${sel[@]}" || rc=$?
  local p f s n
  read -r p f s n < <(junit_counts "$xml")
  STEP_KEY="$p passed, $f failed, $s skipped of $n"
  case $rc in
    0) ;;
    5) skip "no tests collected" ;;
    124) fail "timed out; $STEP_KEY" ;;
    *) fail "$STEP_KEY (pytest exit $rc)"; show_tail "$logf" 20 ;;
  esac
}

# ---------------------------------------------------------------- 6. compute-sanitizer
# sanitize <tool> <filter> <log>: runs the gtest binary under compute-sanitizer and sets
# SAN_ERRORS (the tool's error/hazard count), SAN_PASSED, SAN_SKIPPED; returns its status.
SAN_ERRORS="?" SAN_PASSED=0 SAN_SKIPPED=0
sanitize() {
  local tool=$1 filter=$2 logf=$3 rc=0 extra=()
  : >"$logf"
  [[ $tool == memcheck ]] && extra=(--leak-check=full)
  tmo "$logf" "$SANITIZER" --tool "$tool" --error-exitcode 86 "${extra[@]}" \
    "$BUILD/tests/voxaug_core_tests" --gtest_filter="$filter" || rc=$?
  SAN_ERRORS="$(grep -oE '(ERROR SUMMARY|RACECHECK SUMMARY): [0-9]+' "$logf" | grep -oE '[0-9]+$' | tail -n 1)"
  SAN_PASSED="$(grep -oE '^\[  PASSED  \] [0-9]+' "$logf" | grep -oE '[0-9]+$' | tail -n 1)"
  SAN_SKIPPED="$(grep -oE '^\[  SKIPPED \] [0-9]+' "$logf" | grep -oE '[0-9]+$' | tail -n 1)"
  SAN_ERRORS="${SAN_ERRORS:-?}" SAN_PASSED="${SAN_PASSED:-0}" SAN_SKIPPED="${SAN_SKIPPED:-0}"
  return "$rc"
}

step_sanitizer() {
  if [[ $CPU_ONLY == 1 ]]; then skip "CPU-only mode"; return; fi
  if [[ -z "$SANITIZER" ]]; then fail "compute-sanitizer not found"; return; fi
  if [[ ! -x "$BUILD/tests/voxaug_core_tests" ]]; then fail "no tests/voxaug_core_tests binary"; return; fi
  local m_rc=0 r_rc=0 me mp ms re rp
  sanitize memcheck '*Cuda.*' "$OUT/sanitizer_memcheck.log" || m_rc=$?
  me=$SAN_ERRORS mp=$SAN_PASSED ms=$SAN_SKIPPED
  sanitize racecheck "$RACECHECK_FILTER" "$OUT/sanitizer_racecheck.log" || r_rc=$?
  re=$SAN_ERRORS rp=$SAN_PASSED
  STEP_KEY="memcheck $me errors ($mp tests passed, $ms skipped); racecheck $re hazards ($rp passed)"
  if ((m_rc == 124 || r_rc == 124)); then
    fail "timed out; $STEP_KEY"
  elif ((m_rc != 0 || r_rc != 0)) || [[ "$me" != 0 || "$re" != 0 ]]; then
    fail "$STEP_KEY (exit $m_rc/$r_rc)"
    show_tail "$OUT/sanitizer_memcheck.log" 15
    show_tail "$OUT/sanitizer_racecheck.log" 8
  elif ((mp == 0 || ms > 0 || rp == 0)); then
    fail "$STEP_KEY: CUDA tests did not run under the sanitizer"
  fi
}

# ---------------------------------------------------------------- 7. benchmarks
# Two binaries, each with its own share of the step's time: voxaug_bench_intensity (key: the
# chain vs a device-to-device copy) and voxaug_bench_resample (key: the issue's bar, batched
# RandAffine of 4 x 96^3 image+label vs a copy of the same bytes, target ratio >= 0.50).

# summarize_intensity <json> <backend>: prints "OK|FAIL <key>".
summarize_intensity() {
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
path, backend = sys.argv[1], sys.argv[2]
runs = json.load(open(path)).get("benchmarks", [])
errors = [r["name"] for r in runs if r.get("error_occurred")]
bw = {}
for r in runs:
    parts = r.get("run_name", r["name"]).split("/")
    if r.get("run_type", "iteration") == "iteration" and not r.get("error_occurred") and len(parts) >= 3:
        bw[(parts[0], parts[1], parts[2])] = r.get("bytes_per_second", 0.0) / 1e9
ok = not errors and any(k[0] == backend for k in bw)
shapes = [s for s in ("8x1x256x256x256", "1x1x256x256x256", "1x1x160x224x224") if (backend, "chain", s) in bw]
if not shapes:
    print(("OK" if ok else "FAIL"), f"{len(bw)} cases, {len(errors)} errors, no {backend}/chain case"); sys.exit()
def gbs(x):
    return f"{x:.1f} GB/s" if x >= 10 else f"{x:.3g} GB/s"
s = shapes[0]
chain, copy = bw[(backend, "chain", s)], bw.get((backend, "copy", s))
msg = f"{backend} chain {s}: {gbs(chain)}"
if copy:
    msg += f", copy {gbs(copy)}, ratio {chain / copy:.2f}"
inplace = bw.get((backend, "chain_inplace", s))
if inplace:
    msg += f", in-place {gbs(inplace)}"
print(("OK" if ok else "FAIL"), f"{msg} ({len(bw)} cases, {len(errors)} errors)")
EOF
}

# summarize_resample <json> <backend>: prints "OK|FAIL <key>". GB/s by the benchmark's count
# (output written + one input element read per voxel and target: 10 B/voxel for image+label).
summarize_resample() {
  "$PY" - "$1" "$2" <<'EOF'
import json, sys
path, backend = sys.argv[1], sys.argv[2]
runs = json.load(open(path)).get("benchmarks", [])
errors = [r["name"] for r in runs if r.get("error_occurred")]
bw = {}
for r in runs:
    parts = r.get("run_name", r["name"]).split("/")
    if r.get("run_type", "iteration") == "iteration" and not r.get("error_occurred") and len(parts) >= 3:
        bw[(parts[0], parts[1], parts[2])] = r.get("bytes_per_second", 0.0) / 1e9
ok = not errors and any(k[0] == backend for k in bw)
counts = f"({len(bw)} cases, {len(errors)} errors)"
def gbs(x):
    return f"{x:.1f} GB/s" if x >= 10 else f"{x:.3g} GB/s"
bar = "4x1x96x96x96"
gather = bw.get((backend, "image_label", bar))
if gather is None:
    print(("OK" if ok else "FAIL"), f"resample: no {backend}/image_label/{bar} case {counts}"); sys.exit()
msg = f"resample {backend} image_label {bar}: {gbs(gather)}"
copy = bw.get((backend, "copy_image_label", bar))
if copy:
    ratio = gather / copy
    msg += f", copy {gbs(copy)}, ratio {ratio:.2f} (bar >= 0.50 {'met' if ratio >= 0.5 else 'NOT met'})"
else:
    msg += " (no copy baseline on cpu)" if backend == "cpu" else ", no copy baseline"
elastic = bw.get((backend, "image_label_elastic", bar))
if elastic:  # same byte count: time ratio = plain bytes/s over elastic bytes/s
    slow = gather / elastic
    msg += f"; +elastic {slow:.2f}x the plain gather's time (bar <= 1.5 {'met' if slow <= 1.5 else 'NOT met'})"
print(("OK" if ok else "FAIL"), f"{msg} {counts}")
EOF
}

# bench_binary <name> <filter> <min_time> <summarizer>: runs benchmarks/voxaug_bench_<name>
# (log and JSON in $OUT/bench_<name>.*) under the step's remaining time and sets BENCH_LINE
# to the summarizer's "OK|FAIL <key>".
BENCH_LINE=""
bench_binary() {
  local name=$1 filter=$2 min_time=$3 summarizer=$4 rc=0
  local bin="$BUILD/benchmarks/voxaug_bench_$name" logf="$OUT/bench_$name.log" json="$OUT/bench_$name.json"
  : >"$logf"
  rm -f "$json"
  if [[ ! -x "$bin" ]]; then BENCH_LINE="FAIL no benchmarks/voxaug_bench_$name binary"; return; fi
  # benchmark >= 1.8 wants a unit ("0.2s"); 1.7 wants a bare number.
  local mt="${min_time}s"
  "$bin" --benchmark_list_tests --benchmark_min_time="$mt" >/dev/null 2>&1 || mt="$min_time"
  tmo "$logf" "$bin" --benchmark_filter="$filter" --benchmark_min_time="$mt" \
    --benchmark_out="$json" --benchmark_out_format=json || rc=$?
  if ((rc == 124)); then BENCH_LINE="FAIL $name: timed out"; show_tail "$logf"; return; fi
  if ((rc != 0)) || [[ ! -s "$json" ]]; then
    BENCH_LINE="FAIL $name: benchmark exit $rc, no JSON: $(tail -n 1 "$logf")"; show_tail "$logf"; return
  fi
  BENCH_LINE="$("$summarizer" "$json" "$DEVICE" 2>&1 | tail -n 1)"
  [[ "$BENCH_LINE" == OK\ * ]] || { BENCH_LINE="FAIL ${BENCH_LINE#FAIL }"; show_tail "$logf"; }
}

step_bench() {
  if [[ $HAVE_BENCHMARK == 0 ]]; then
    skip "no Google Benchmark (run scripts/prepare_device_bundle.sh to bundle its sources)"; return
  fi
  # The intensity run leaves the resample run its reserve (at most half the step).
  local end=$STEP_END reserve=$BENCH_RESAMPLE_RESERVE_S intensity resample
  (((end - SECONDS) / 2 < reserve)) && reserve=$(((end - SECONDS) / 2))
  STEP_END=$((end - reserve))
  bench_binary intensity "$BENCH_FILTER" "$BENCH_MIN_TIME" summarize_intensity
  intensity=$BENCH_LINE
  STEP_END=$end
  bench_binary resample "$BENCH_RESAMPLE_FILTER" "$BENCH_RESAMPLE_MIN_TIME" summarize_resample
  resample=$BENCH_LINE
  # Two lines in the summary table: the resample key continues under the KEY column.
  STEP_KEY="${intensity#* }"$'\n'"$(printf '%26s' '')${resample#* }"
  [[ $intensity == OK\ * && $resample == OK\ * ]] || STEP_STATUS=FAIL
  return 0
}

# ---------------------------------------------------------------- 8. MONAI comparison
step_compare() {
  local logf="$OUT/compare.log" json="$OUT/compare.json" rc=0
  rm -f "$logf" "$json"
  if [[ ! -f benchmarks/compare.py ]]; then skip "no benchmarks/compare.py"; return; fi
  tmo "$logf" "$PY" benchmarks/compare.py --device "$DEVICE" --json "$json" || rc=$?
  if ((rc == 124)); then fail "timed out"; return; fi
  if ((rc != 0)); then fail "compare.py exit $rc"; show_tail "$logf"; return; fi
  # The line that states the speed bar, when compare.py prints one; else a pointer to the log.
  STEP_KEY="$(grep -iE '\bbar\b.*\b(PASS|FAIL)' "$logf" | tail -n 1 | cut -c1-110)"
  STEP_KEY="${STEP_KEY:-see compare.log}"
  [[ -s "$json" ]] || fail "compare.py wrote no $json"
}

# ---------------------------------------------------------------- 9. sliding-window inference
# compare_window.py (gather / stitch around an identity and a small conv net, vs MONAI, outside-
# the-predictor times), then swin_window.py (MONAI's SwinUNETR, best sw_batch_size each) with
# what is left of the step. KEY: the SwinUNETR bar line, else compare_window's.
step_window() {
  local logf="$OUT/window.log" rc=0 left
  rm -f "$logf"
  if [[ ! -f benchmarks/compare_window.py ]]; then skip "no benchmarks/compare_window.py"; return; fi
  tmo "$logf" "$PY" benchmarks/compare_window.py --device "$DEVICE" --repeats 2 || rc=$?
  if ((rc == 124)); then fail "compare_window timed out"; return; fi
  if ((rc != 0)); then fail "compare_window.py exit $rc"; show_tail "$logf"; return; fi
  STEP_KEY="$(grep -E 'BAR|worst' "$logf" | tail -n 1 | cut -c1-110)"
  if [[ $DEVICE == cuda ]]; then
    left=$(($(step_left) - 15))
    if ((left > 30)); then
      tmo "$logf" "$PY" benchmarks/swin_window.py --device cuda --budget "$left" --sw 1,4,16 --repeats 1 || rc=$?
      ((rc == 0)) || { fail "swin_window.py exit $rc"; show_tail "$logf"; return; }
      STEP_KEY="$(grep -E '^BAR' "$logf" | tail -n 1 | cut -c1-110)"
      STEP_KEY="${STEP_KEY:-see window.log}"
    fi
  fi
}

# ---------------------------------------------------------------- 9b. patch queue and grid inference
# compare_queue.py (issue 6's queue throughput: the BTCV chain on ch2 + aal, voxaug's PatchQueue
# vs MONAI) and compare_grid.py (TorchIO's GridSampler / GridAggregator vs voxaug's). Not in the
# default steps (the device minutes go to the checks first): VOXAUG_DEVICE_CHECK_STEPS="env
# prebuilt deps build queue". KEY: the queue's ratio line.
step_queue() {
  local logf="$OUT/queue.log" rc=0
  rm -f "$logf"
  if [[ ! -f benchmarks/compare_queue.py ]]; then skip "no benchmarks/compare_queue.py"; return; fi
  tmo "$logf" "$PY" benchmarks/compare_queue.py --device "$DEVICE" --repeats 3 || rc=$?
  if ((rc != 0)); then fail "compare_queue.py exit $rc"; show_tail "$logf"; return; fi
  if [[ -f benchmarks/compare_grid.py ]]; then
    tmo "$logf" "$PY" benchmarks/compare_grid.py --device "$DEVICE" --repeats 3 || rc=$?
    ((rc == 0)) || { fail "compare_grid.py exit $rc"; show_tail "$logf"; return; }
  fi
  STEP_KEY="$(grep -E '^voxaug queue / monai' "$logf" | tail -n 1 | cut -c1-110)"
  STEP_KEY="${STEP_KEY:-see queue.log}"
}

# ---------------------------------------------------------------- 10. training pipeline (issue 8)
# Not in the default steps (it needs most of a session's device minutes): run it alone with
# VOXAUG_DEVICE_CHECK_STEPS="env prebuilt deps build train". The C++ trainer (phantom data, Swin UNETR
# feature 48, 96^3 x 4 patches, bf16), then compare_train.py (voxaug vs MONAI data path and
# time to Dice, same model) with what is left. KEY: the trainer's summary line and
# compare_train's ratio lines (data path, final Dice, time to Dice).
TRAIN_STEPS="${VOXAUG_TRAIN_STEPS:-300}"
step_train() {
  local logf="$OUT/train.log" rc=0 left bin="$BUILD/examples/swin_unetr/voxaug_swin_train"
  : >"$logf"
  local keys=()
  if [[ -x "$bin" ]]; then
    tmo "$logf" "$bin" --device "$DEVICE" --dataset phantom --steps "$TRAIN_STEPS" \
      --val-every $((TRAIN_STEPS / 3)) --log-every 25 --out "$OUT/train_cpp" || rc=$?
    if ((rc != 0)); then fail "voxaug_swin_train exit $rc"; show_tail "$logf"; return; fi
    keys+=("cpp: $(grep -E '^summary' "$logf" | tail -n 1 | cut -c1-90)")
  else
    keys+=("no voxaug_swin_train binary")
  fi
  left=$(($(step_left) - 10))
  if [[ -f benchmarks/compare_train.py ]] && ((left > 60)); then
    rc=0
    tmo "$logf" "$PY" benchmarks/compare_train.py --device "$DEVICE" --steps "$TRAIN_STEPS" \
      --out "$OUT/compare_train" || rc=$?
    if ((rc != 0)); then fail "compare_train.py exit $rc"; show_tail "$logf"; return; fi
    keys+=("$(grep -E '^(data path: monai|time to Dice|final Dice)' "$logf" | cut -c1-90 | paste -sd ';' -)")
  fi
  STEP_KEY="$(printf '%s; ' "${keys[@]}")"
}

# ---------------------------------------------------------------- run
log "mode: $([[ $CPU_ONLY == 1 ]] && echo cpu-only || echo full), budget ${BUDGET}s, $JOBS jobs, out $OUT, build $BUILD"
# VOXAUG_DEVICE_CHECK_STEPS: the steps to run (default: all but train, which needs its own
# device minutes), e.g. "env prebuilt deps build train" for the training benchmark alone.
STEPS=" ${VOXAUG_DEVICE_CHECK_STEPS:-env prebuilt deps build ctest pytest sanitizer bench compare window} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
want env && run_step env 30 step_env
want prebuilt && run_step prebuilt 60 step_prebuilt
want deps && run_step deps 150 step_deps
want build && run_step build 360 step_build
want ctest && run_step ctest 150 step_ctest
want pytest && run_step pytest 120 step_pytest
want sanitizer && run_step sanitizer 150 step_sanitizer
want bench && run_step bench 120 step_bench
want compare && run_step compare 120 step_compare
want window && run_step window 150 step_window
want queue && run_step queue 150 step_queue
want train && run_step train 400 step_train

if [[ -s "$OUT/train.log" ]]; then
  echo
  log "train (tail):"
  tail -n 30 "$OUT/train.log"
fi
if [[ -s "$OUT/queue.log" ]]; then
  echo
  log "queue (tail):"
  tail -n 20 "$OUT/queue.log"
fi
if [[ -s "$OUT/window.log" ]]; then
  echo
  log "window (tail):"
  tail -n 20 "$OUT/window.log"
fi
if [[ -s "$OUT/compare.log" ]]; then
  echo
  log "compare.py (tail):"
  tail -n 30 "$OUT/compare.log"
fi

{
  echo
  printf '%-10s %-6s %6s  %s\n' STEP STATUS SECONDS KEY
  for i in "${!NAMES[@]}"; do
    printf '%-10s %-6s %6s  %s\n' "${NAMES[$i]}" "${STATUSES[$i]}" "${TIMES[$i]}" "${KEYS[$i]}"
  done
  printf 'total %ss; logs in %s\n' "$SECONDS" "$OUT"
} | tee "$OUT/summary.txt"
for s in "${STATUSES[@]}"; do [[ $s == FAIL ]] && exit 1; done
exit $((INCOMPLETE ? 2 : 0))
