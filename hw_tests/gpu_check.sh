#!/usr/bin/env bash
# The GPU check, in one go, on a bare NVIDIA machine without network: install the carried wheels and the
# project (--no-deps), build llama.cpp with CUDA for this GPU only, run every check, write the figures.
#
#   hw_tests/gpu_check.sh [--out DIR] [--payload DIR] [--dry-run]
#
# Prepare the payload first, on a machine with the package registry and the engine bundle:
#   .venv/bin/python -m hw_tests.payload            (writes .gpu-payload/, at most 64 MiB)
# --dry-run (no GPU, CI): everything up to the first GPU call, with this machine's Python and CPU
# llama.cpp: the payload's size and completeness, the slimmed llama.cpp tree configured with CMake, the
# project installed, and every check run on the CPU with small models.
#
# GPU_CHECK_FLASH_ATTENTION=1 compiles llama.cpp's FlashAttention kernels too (about twice the build).
# --build-only: stop once llama.cpp is built (GPU_CHECK_CUDA_ARCH=90 builds without a GPU, e.g. to try
# the CUDA build on a machine with the CUDA toolkit only).
#
# What comes out (DIR, default ./gpu-check-out): summary.md (one line a check), results.json (all
# figures), build.log (llama.cpp's CUDA build), check.log. Exit status 0 when every check passed.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
out="$repo/gpu-check-out"
payload="$repo/.gpu-payload"
dry_run=0
build_only=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=$2; shift 2 ;;
        --payload) payload=$2; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        --build-only) build_only=1; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"
started=$(date +%s)
say() { echo "gpu_check [$(( $(date +%s) - started )) s]: $*" | tee -a "$out/check.log" >&2; }
fail() { say "FAILED: $*"; exit 1; }

# cuBLAS and the driver library for CMake. A CUDA toolkit without cuBLAS (a compiler-only image) gets the
# cuBLAS that PyTorch brought with it (pip's nvidia-cublas wheels); without the driver's libcuda (no stub
# in the toolkit), llama.cpp's virtual-memory pool, the one thing that links it directly, is left out.
cuda_libraries() {
    local toolkit=${CUDA_HOME:-/usr/local/cuda} wheels shim driver args=""
    echo "$toolkit/lib64" >"$work/cuda.libs"  # for the checks: this runs in a subshell
    if [ ! -f "$toolkit/include/cublas_v2.h" ]; then
        wheels=$("$python" -c 'import glob, site
roots = site.getsitepackages() + [site.getusersitepackages()]
found = [h for r in roots for h in sorted(glob.glob(r + "/nvidia/*/include/cublas_v2.h"))]
print(found[0].rsplit("/include/", 1)[0] if found else "")')
        [ -n "$wheels" ] || { say "FAILED: no cuBLAS: neither $toolkit nor a pip nvidia-cublas package has cublas_v2.h"; return 1; }
        shim="$work/cublas"
        mkdir -p "$shim/include" "$shim/lib"
        ln -sf "$wheels"/include/cublas*.h "$shim/include/"
        for lib in cublas cublasLt; do ln -sf "$(ls "$wheels/lib/lib$lib.so."* | head -1)" "$shim/lib/lib$lib.so"; done
        args="-DCUDA_cublas_LIBRARY=$shim/lib/libcublas.so -DCUDA_cublasLt_LIBRARY=$shim/lib/libcublasLt.so"
        args="$args -DCMAKE_CUDA_FLAGS=-I$shim/include"
        echo "$wheels/lib" >>"$work/cuda.libs"
        say "cuBLAS from $wheels"
    fi
    driver=$( (ldconfig -p 2>/dev/null | awk '/libcuda\.so/ {print $NF}'; \
        ls /usr/local/nvidia/lib64/libcuda.so* "$toolkit"/lib64/stubs/libcuda.so 2>/dev/null) | head -1)
    if [ -n "$driver" ]; then
        args="$args -DCUDA_cuda_driver_LIBRARY=$driver"
    else
        args="$args -DGGML_CUDA_NO_VMM=ON"
        say "no libcuda to link: llama.cpp is built without its virtual-memory pool (GGML_CUDA_NO_VMM)"
    fi
    echo "$args"
}

python=${PYTHON:-python3}
if [ $dry_run = 1 ] && [ -x "$repo/.venv/bin/python" ] && [ -z "${PYTHON:-}" ]; then
    python="$repo/.venv/bin/python"
fi
[ -f "$payload/payload.json" ] || fail "no payload in $payload: make it with .venv/bin/python -m hw_tests.payload"

say "payload: checking its size and that its wheels and this machine's packages cover every import"
"$python" -m hw_tests.payload --verify "$payload" || fail "the payload is incomplete or too large (see above)"

work=$(mktemp -d /tmp/gpu-check.XXXXXX)
site="$work/site"
if [ $dry_run = 1 ]; then
    # This machine's Python is not the payload's: the project goes into a target folder, without the
    # wheels, which were verified above; the environment's own packages stand in for the machine's.
    "$python" -m pip install -q --no-deps --no-build-isolation --no-index --target "$site" "$repo" \
        >>"$out/check.log" 2>&1 || fail "the project did not install with --no-deps (check.log)"
elif [ $build_only = 0 ]; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
        "$payload"/wheels/*.whl >>"$out/check.log" 2>&1 || fail "the carried wheels did not install (check.log)"
    PYTHONPATH="$site" "$python" -m pip install -q --no-deps --no-build-isolation --no-index --target "$site" \
        --upgrade "$repo" >>"$out/check.log" 2>&1 \
        || say "the project did not install with --no-deps (check.log); the checks run from the source tree"
fi
export PYTHONPATH="$site"
[ $build_only = 1 ] || say "installed the project into $site"

sdist=$(ls "$payload"/llama_cpp_python-*-slim.tar.gz)
cpu_args=$(cd "$repo" && "$python" -c 'from build_scripts.llama_build.profile import choose_profile, cpu_features
print(" ".join(choose_profile(cpu_features()).cmake_args))')
if [ $dry_run = 1 ]; then
    mkdir -p "$work/src"
    tar xzf "$sdist" -C "$work/src"
    # shellcheck disable=SC2086
    cmake -S "$work"/src/llama_cpp_python-* -B "$work/configure" -G Ninja $cpu_args >"$out/build.log" 2>&1 \
        || fail "the slimmed llama.cpp tree does not configure (build.log)"
    say "the slimmed llama.cpp tree configures ($cpu_args); the dry run uses this environment's CPU llama.cpp"
else
    command -v nvcc >/dev/null || export PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"
    command -v nvcc >/dev/null || fail "no nvcc: the CUDA build needs the CUDA toolkit"
    arch=${GPU_CHECK_CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')}
    [ -n "$arch" ] || fail "nvidia-smi did not name the GPU's compute capability (or set GPU_CHECK_CUDA_ARCH=90)"
    # FlashAttention's kernels are 82 of the 189 CUDA files and the slowest to compile: left out unless
    # GPU_CHECK_FLASH_ATTENTION=1, so the build fits a short window (llama.cpp then attends without them).
    fa=$([ "${GPU_CHECK_FLASH_ATTENTION:-0}" = 1 ] && echo ON || echo OFF)
    cuda_args="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$arch -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_FA=$fa"
    cuda_args="$cuda_args $(cuda_libraries)" || exit 1
    say "building llama.cpp with CUDA for sm_$arch on $(nproc) cores ($cpu_args $cuda_args)"
    export CMAKE_ARGS="$cpu_args $cuda_args"
    export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) CMAKE_GENERATOR=Ninja
    # Source and build folders stay at fixed places in the repository's ignored build/: a second run on
    # a machine still held compiles nothing again.
    source="$repo/build/gpu-llama-src"
    if [ ! -f "$source/$(basename "$sdist").unpacked" ]; then
        rm -rf "$source" && mkdir -p "$source"
        tar xzf "$sdist" -C "$source" --strip-components=1 && touch "$source/$(basename "$sdist").unpacked"
    fi
    timeout "${GPU_CHECK_BUILD_TIMEOUT_S:-480}" "$python" -m pip install -v --no-deps --no-build-isolation \
        --no-index --target "$site" --upgrade --config-settings=build-dir="$repo/build/gpu-llama-cpp" \
        "$source" >"$out/build.log" 2>&1 || fail "the CUDA build of llama.cpp failed (build.log)"
    say "llama.cpp built with CUDA"
    [ $build_only = 0 ] || exit 0
fi

[ -f "$work/cuda.libs" ] && export LD_LIBRARY_PATH="$(paste -sd: "$work/cuda.libs"):${LD_LIBRARY_PATH:-}"
say "running the checks"
cd "$repo" && "$python" -m hw_tests.gpu_check --payload "$payload" --out "$out" \
    $([ $dry_run = 1 ] && echo --dry-run) 2>&1 | tee -a "$out/check.log"
status=${PIPESTATUS[0]}
rm -rf "$work"
say "done, exit status $status; figures in $out/summary.md and $out/results.json"
exit "$status"
