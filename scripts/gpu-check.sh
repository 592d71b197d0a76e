#!/usr/bin/env bash
# The checks of a lent GPU machine, in one run, in GPU.md's order: torch eager on cpu and cuda; the planted-bug
# self-test on cuda (one process; its variants that plant into the framework's answers), alone on the machine;
# Inductor and its emulated casts over the whole mode suite on cuda; optax eager and jit on cpu and gpu; every torch
# mode over the mode slice on cpu; and the merged report. Each step has its own time limit and log, so a step that
# fails or runs out of time loses none of the others (an interrupted run keeps its rows and the report merges them);
# the last mode step takes what is left of KL_GPU_DEADLINE_S. Everything is packed into $OUT/gpu-check.tar.gz, with
# the steps' summary in $OUT/steps.log.
#
#   OUT=/tmp/gpu bash scripts/gpu-check.sh            # the machine's python3 holds torch, JAX and optax
#   KL_GPU_SELFTEST_ONLY="fwd/*/4x6/*" ...             # narrow the self-test's cases (glob, repeatable by space)
#
# The harness is installed without dependencies into that Python; a missing pure-Python dependency
# (jsonschema on the lent machines) comes as wheels in .whl/ (see docs/guide/devices.md, CUDA and Ascend).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the directory the results go to}"
work="${TMPDIR:-/tmp}/gpu-check"
rm -rf "$work"
mkdir -p "$work/logs"
export PYTHONUNBUFFERED=1 PYTHONSAFEPATH=1 KL_CACHE_DIR="$work/kl-cache"
log="$work/logs/steps.log"
workers=$(( $(nproc) > 2 ? $(nproc) - 1 : 1 ))  # a core for the run judging the rows

step() {  # step NAME LIMIT_S COMMAND...: run one step, record its exit status and duration
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout -k 10 "$limit" "$@" >"$work/logs/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc seconds=$((SECONDS - start))" | tee -a "$log"
    return 0
}

{
    date -u
    git log -1 --format='commit %H' 2>/dev/null || echo "commit: not a git checkout"
    echo "cores $(nproc), workers $workers"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    nvidia-smi | grep -o 'CUDA Version: [0-9.]*'
    python3 -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)'
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
    python3 -c 'import triton, onnx, onnxruntime, onnxscript; print("triton", triton.__version__, "onnx", onnx.__version__, "onnxruntime", onnxruntime.__version__, "onnxscript", onnxscript.__version__)'
    python3 -c 'import jax, jaxlib, optax; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, "optax", optax.__version__, jax.devices())'
} >"$work/logs/machine.log" 2>&1

if compgen -G ".whl/*.whl" >/dev/null; then
    step wheels 60 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
step install 60 python3 -m pip install -q --no-deps --no-build-isolation -e .
kl=(python3 -m conformance)
runs=()

deadline=${KL_GPU_DEADLINE_S:-480}
only=()
for pattern in ${KL_GPU_SELFTEST_ONLY:-}; do only+=(--only "$pattern"); done
# the variants that plant into cuda's answers. The crash and the hang test the worker pool, which is the same on
# any device; each case they plant into starts a worker again, they take about half the self-test's time on a CPU
# machine, and with them the self-test on the lent H200 did not finish in the time lent (docs/guide/devices.md)
variants=()
for name in $(python3 -c 'from conformance.selftest.variants import VARIANTS
print(" ".join(n for n in VARIANTS if n not in ("crash", "hang")))' 2>>"$work/logs/steps.log"); do
    variants+=(--variant "$name")
done
step torch "${KL_GPU_TORCH_S:-90}" "${kl[@]}" run --framework torch --jobs "$workers" --out "$work/torch" --no-progress --force
runs+=("$work/torch")
# alone: beside the other steps' workers (and Inductor's compile workers) it did not finish on the lent H200; alone
# it took 140 s there (docs/guide/devices.md, 2026-11-29), the variants' judging on that machine's slower CPU
if (( ${#variants[@]} == 0 )); then  # the harness did not import: every variant would run, crash and hang too
    echo "selftest-cuda not run: the variants could not be listed (see install.log)" | tee -a "$log"
else
    step selftest-cuda "${KL_GPU_SELFTEST_S:-200}" "${kl[@]}" selftest --framework torch --device cuda \
        --out "$work/selftest-cuda" --force "${only[@]}" "${variants[@]}"
fi
step modes 30 "${kl[@]}" modes
# Inductor (Triton) and its emulated casts over the whole mode suite on cuda; the CPU's Inductor compiles C++ far
# slower, so its column and the ONNX modes (which run on CPU) take the slice, last, with what time is left
step torch-modes-cuda "${KL_GPU_MODES_S:-150}" "${kl[@]}" run --framework torch --suite modes --mode inductor \
    --mode inductor-emulated --device cuda --jobs "$workers" --out "$work/torch-modes-cuda" --no-progress --force
runs+=("$work/torch-modes-cuda")
JAX_ENABLE_X64=1 step optax "${KL_GPU_OPTAX_S:-120}" "${kl[@]}" run --framework optax --mode eager --mode jit \
    --jobs "$workers" --out "$work/optax" --no-progress --force
runs+=("$work/optax")
left=$(( deadline - SECONDS - 45 ))
if (( left > 30 )); then
    step torch-modes-cpu "$left" "${kl[@]}" run --framework torch --suite mode-slice --mode inductor \
        --mode inductor-emulated --mode onnx-torchscript --mode onnx-dynamo --device cpu --jobs "$workers" \
        --out "$work/torch-modes-cpu" --no-progress --force
    runs+=("$work/torch-modes-cpu")
fi
step report 40 "${kl[@]}" report "${runs[@]}" --out "$work/all" --allow-missing --force

# the self-test's variant runs stay behind (its verdict is selftest.md and selftest.json, the planted rows beside
# them), so that the archive fits what comes back from the machine
tar -czf "$OUT/gpu-check.tar.gz" --exclude=kl-cache --exclude='gpu-check/selftest-cuda/*/*' \
    -C "$(dirname "$work")" gpu-check
cp "$log" "$OUT/steps.log"
cp "$work/selftest-cuda/selftest.md" "$OUT/selftest.md" 2>/dev/null || true
cp "$work/all/report.md" "$OUT/report.md" 2>/dev/null || true
