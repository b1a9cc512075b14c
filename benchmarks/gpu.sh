#!/usr/bin/env bash
# The GPU figures BENCHMARKS.md lacks, in few full calls on a lent GPU machine (an H100 or H200, 16 cores).
#
# Here, once (the machine reaches no registry; its image has torch and JAX but not podium's other needs):
#     bash scripts/gpu-wheels.sh                  # -> .whl/ (about 30 MiB)
# Then through the device tool, each part one call with carry [".whl"] (PART's budget in brackets):
#     bash benchmarks/gpu.sh a     # [~9 min] the GPU tests; env throughput at 4k..4M sub-envs; MJX throughput
#     bash benchmarks/gpu.sh b     # [~9 min] PPO/SAC pods on cuda vs the CPU (confirmed time to target, pod speed);
#                                  #          1-8 pods of a tournament sharing the GPU (benchmarks/scaling.py)
#     bash benchmarks/gpu.sh c     # [~9 min] Ant: a PPO pod, then the tournament of examples/ant.yaml, 180 s each
#     bash benchmarks/gpu.sh smoke # here, on the CPU: every step at toy sizes, to check this script
# Each step runs under its own time limit; logs and JSON go to $OUT (the device tool brings back at most 8
# files: one log per part, one JSON per step that writes one), and the end of each step's output is printed
# last, for the reply's output tail. The limits add up to about 9 minutes for a, 8.5 for b and 9 for c: a
# session's 15 device minutes (a machine's start included) fit a and b only where they end well inside
# their limits; run a first, and b or c with what is left.
# Record every figure in BENCHMARKS.md with the machine line it prints.
set -uo pipefail
cd "$(dirname "$0")/.."
PART=${1:-a}
OUT=${OUT:-/tmp/podium-gpu}
mkdir -p "$OUT"
LOG="$OUT/gpu-$PART.log"
PY=${PY:-python3}
DEVICE=cuda
if [[ $PART == smoke ]]; then
    DEVICE=cpu
    PY=${PY_SMOKE:-.venv/bin/python}
fi

if [[ $PART != smoke ]]; then
    [[ -d .whl ]] || { echo "error: no .whl here: run 'bash scripts/gpu-wheels.sh' here first and carry .whl" >&2; exit 1; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "error: the carried wheels did not install (bash scripts/gpu-wheels.sh, carry .whl)"; exit 1; }
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1  # (no MUJOCO_GL: nothing renders there, and the image may lack EGL)

summary=()
step() {  # step NAME SECONDS COMMAND...: run it under a time limit, its output appended to the part's log
    local name=$1 limit=$2 start rc
    shift 2
    start=$(date +%s)
    echo "=== $name (limit ${limit} s): $*" | tee -a "$LOG"
    timeout -k 15 "$limit" "$@" >> "$LOG" 2>&1
    rc=$?
    summary+=("$(printf '%-22s rc=%-3s %4s s' "$name" "$rc" $(($(date +%s) - start)))")
    echo "=== $name: rc=$rc" >> "$LOG"
}

step machine 30 "$PY" -c "
import torch, podium.machine as m
print('machine:', m.describe())
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'GPU:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
try:
    import jax; print('jax', jax.__version__, jax.devices())
except Exception as e: print('jax:', e)
"
[[ $DEVICE == cuda ]] && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv >> "$LOG" 2>&1

case $PART in
a)
    PODIUM_REQUIRE_GPU=1 step gpu-tests 220 "$PY" -m pytest tests/test_gpu.py -q -p no:cacheprovider --timeout 120
    step env-throughput 80 "$PY" benchmarks/env_throughput.py --device cuda --seconds 1 --peer-budget 15 \
        --sizes 4096,65536,262144,1048576,4194304 --json "$OUT/env_throughput.json"
    # what the per-step action check (a host sync on a GPU; pods keep it on) costs there
    step env-no-validate 40 "$PY" benchmarks/env_throughput.py --device cuda --seconds 1 --peer-budget 0 \
        --sizes 1024,65536 --no-validate
    # every size compiles MJX's step anew (about 20 s each): two sizes, its JSON written after each row
    step mjx-throughput 180 "$PY" benchmarks/locomotion.py --part throughput --sizes 4096,32768 \
        --seconds 3 --json "$OUT/mjx_throughput.json"
    ;;
b)
    step pods-target 200 "$PY" benchmarks/gpu_pods.py --parts target --tasks ppo-pendulum,sac-pendulum \
        --seeds 0,1,2 --cap 30 --num-envs 1024 --json "$OUT/gpu_pods_target.json"
    step pods-throughput 110 "$PY" benchmarks/gpu_pods.py --parts throughput --sizes 64,1024,16384,65536 \
        --seconds 6 --json "$OUT/gpu_pods_throughput.json"
    step scaling-pods 180 "$PY" benchmarks/scaling.py --part pods --pods 1,2,4,8 --device cuda --seconds 20 \
        --round 5 --seeds 0
    ;;
c)
    # a PPO pod, then the tournament of examples/ant.yaml, each for --cap seconds of training; each of their
    # processes compiles MJX first, and a pod checks its budget between learning phases
    step ant-train 500 "$PY" benchmarks/locomotion.py --part train --envs Ant-v5 --cap 180 --json "$OUT/ant_train.json"
    ;;
smoke)
    OMP_NUM_THREADS=1 PODIUM_TEST_DEVICE=cpu step gpu-tests 600 "$PY" -m pytest tests/test_gpu.py -q -x \
        -p no:cacheprovider -k "not mjx and not learns"
    step env-throughput 120 "$PY" benchmarks/env_throughput.py --device cpu --seconds 0.2 --peer-budget 2 \
        --sizes 64,256 --json "$OUT/env_throughput.json"
    step pods-target 300 "$PY" benchmarks/gpu_pods.py --devices cpu --parts target --tasks sac-pendulum --seeds 0 \
        --cap 30 --json "$OUT/gpu_pods_target.json"
    step pods-throughput 120 "$PY" benchmarks/gpu_pods.py --devices cpu --parts throughput --sizes 64 --seconds 3
    step mjx-throughput 300 "$PY" benchmarks/locomotion.py --part throughput --device cpu --sizes 16 --seconds 1
    step scaling-pods 150 "$PY" benchmarks/scaling.py --part pods --pods 1 --device cpu --seconds 10 --round 5 \
        --seeds 0
    ;;
*)
    echo "usage: bash benchmarks/gpu.sh a|b|c|smoke" >&2
    exit 2
    ;;
esac

# a tournament's pods run in sessions of their own: none may outlive a step stopped at its limit (on the lent
# machine only: here they may be someone else's)
[[ $PART != smoke ]] && pkill -f "podium.tournament.backends.process" 2>/dev/null

# the end of each step's output (their tables), then the summary: what the reply's output tail shows
for name in $(grep -oP '^=== \K\S+(?= \(limit)' "$LOG"); do
    echo "--- $name"
    sed -n "/^=== $name (limit/,/^=== $name: rc=/p" "$LOG" | grep -v '^===' | tail -n 18
done
echo
echo "part $PART on $(hostname), log $LOG:"
printf '  %s\n' "${summary[@]}"
