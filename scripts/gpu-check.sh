#!/usr/bin/env bash
# The checks of a lent GPU machine, in one run: torch on cpu and cuda, torch's Inductor on cuda over the mode
# suite, the planted-bug self-test on cuda, optax eager and jit on cpu and gpu, and the merged report. Each step
# has its own time limit and its own log, so a step that fails or runs out of time loses none of the others, and
# the self-test, the longest, takes what is left of KL_GPU_DEADLINE_S. Everything is packed into
# $OUT/gpu-check.tar.gz, with the steps' summary in $OUT/steps.log.
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
    git log -1 --format='commit %H'
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    nvidia-smi | grep -o 'CUDA Version: [0-9.]*'
    python3 -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)'
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
    python3 -c 'import jax, jaxlib, optax; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, "optax", optax.__version__, jax.devices())'
} >"$work/logs/machine.log" 2>&1

if compgen -G ".whl/*.whl" >/dev/null; then
    step wheels 60 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
step install 60 python3 -m pip install -q --no-deps --no-build-isolation -e .
kl=(python3 -m conformance)

step torch "${KL_GPU_TORCH_S:-120}" "${kl[@]}" run --framework torch --out "$work/torch" --no-progress --force
step modes 30 "${kl[@]}" modes
# torch's compiled modes on cuda, where Inductor compiles with Triton: one compile per signature, so the mode
# suite, on one API (the ONNX modes run on CPU only, checked on the CPU machines); Inductor first, then the
# emulated casts on the pinned cases only
step torch-inductor "${KL_GPU_MODES_S:-200}" "${kl[@]}" run --framework torch --suite modes --mode inductor \
    --device cuda --api torch.nn.functional.kl_div --out "$work/torch-inductor" --no-progress --force
step torch-emulated 60 "${kl[@]}" run --framework torch --suite modes --family pinned --mode inductor \
    --mode inductor-emulated --out "$work/torch-emulated" --no-progress --force
JAX_ENABLE_X64=1 step optax "${KL_GPU_OPTAX_S:-100}" "${kl[@]}" run --framework optax --mode eager --mode jit \
    --out "$work/optax" --no-progress --force
step report 30 "${kl[@]}" report "$work/torch" "$work/torch-inductor" "$work/torch-emulated" "$work/optax" \
    --out "$work/all" --allow-missing --force
only=()
for pattern in ${KL_GPU_SELFTEST_ONLY:-}; do only+=(--only "$pattern"); done
left=$(( ${KL_GPU_DEADLINE_S:-450} - SECONDS - 20 ))
step selftest-cuda "$(( left > 30 ? left : 30 ))" "${kl[@]}" selftest --framework torch --device cuda \
    --out "$work/selftest-cuda" --force "${only[@]}"

tar -czf "$OUT/gpu-check.tar.gz" --exclude=kl-cache -C "$(dirname "$work")" gpu-check
cp "$log" "$OUT/steps.log"
