#!/usr/bin/env bash
# CUDA/NCCL checks for a machine with an NVIDIA GPU, Open MPI's mpirun, torch, mpi4py and h5py (not run in CI:
# CI has no GPU). Run from the repository root: bash tests/device/gpu_checks.sh [OUTDIR]
# Each step prints "CHECK <name>: ok" or "CHECK <name>: FAILED"; the script's exit status is the failures.
set -u
OUT=${1:-/tmp/propulate-gpu-checks}
mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe -n 2)
PY=python3
failures=0
check() {  # check NAME EXPECTED_RC COMMAND...
    local name=$1 expected=$2
    shift 2
    local started=$SECONDS
    "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    if [ "$rc" -eq "$expected" ]; then
        echo "CHECK $name: ok (exit $rc, $((SECONDS - started)) s)"
    else
        echo "CHECK $name: FAILED (exit $rc, expected $expected, $((SECONDS - started)) s)"
        tail -n 30 "$OUT/$name.log"
        failures=$((failures + 1))
    fi
}
nvidia-smi -L
$PY -c "import torch, mpi4py, h5py; from mpi4py import MPI; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.device_count(), 'mpi4py', mpi4py.__version__, MPI.Get_library_version().splitlines()[0], 'h5py', h5py.__version__)"

TUTORIAL=(tutorials/torch_ddp_example.py --generations 3 --pop-size 2 --verbosity 0)
# 1. The DDP tutorial on CUDA with NCCL: two 1-rank workers sharing the one GPU (asked for), both methods.
for method in nccl-slurm nccl-openmpi; do
    check "tutorial-$method" 0 env PROPULATE_SHARE_GPUS=1 timeout 300 "${MPIRUN[@]}" $PY "${TUTORIAL[@]}" \
        --ranks-per-worker 1 --method "$method" --checkpoint "$OUT/ckpt-$method"
done
# 2. Resuming the finished run with more generations continues it (same layout, CUDA).
check tutorial-resume 0 env PROPULATE_SHARE_GPUS=1 timeout 300 "${MPIRUN[@]}" $PY tutorials/torch_ddp_example.py \
    --generations 4 --pop-size 2 --verbosity 0 --ranks-per-worker 1 --method nccl-slurm \
    --checkpoint "$OUT/ckpt-nccl-slurm"
$PY - "$OUT/ckpt-nccl-slurm" <<'PYEOF'
import sys
from propulate import load_checkpoint
checkpoint = load_checkpoint(sys.argv[1])
counts = sorted(info.generation_end for info in checkpoint.writers.values())
print("CHECK resume-counts:", "ok" if counts == [4, 4] else f"FAILED {counts}", len(checkpoint.population))
PYEOF
# 3. Two ranks of one worker on one GPU: a clear error on every rank, no NCCL "Duplicate GPU", no hang.
check one-gpu-two-ranks 1 timeout 120 "${MPIRUN[@]}" $PY "${TUTORIAL[@]}" --ranks-per-worker 2 \
    --method nccl-slurm --checkpoint "$OUT/ckpt-shared"
grep -c "would share GPU" "$OUT/one-gpu-two-ranks.log" | sed 's/^/ranks that reported the shared GPU: /'
# 4. SIGTERM during NCCL training: exit 0 within the grace period + 10 s, then the run resumes.
(env PROPULATE_SHARE_GPUS=1 PROPULATE_GRACE_PERIOD=2 "${MPIRUN[@]}" $PY tutorials/torch_ddp_example.py \
    --generations 50 --pop-size 2 --verbosity 0 --ranks-per-worker 1 --epochs 2 --checkpoint "$OUT/ckpt-term" \
    >"$OUT/sigterm.log" 2>&1) &
launcher=$!
for _ in $(seq 1 120); do
    ls "$OUT"/ckpt-term/propulate-s0000-w*.h5 >/dev/null 2>&1 && break
    sleep 0.5
done
sleep 8
sent=$SECONDS
# To the ranks, as SLURM's --signal and scancel --signal deliver it (not to mpirun, which may kill outright).
pkill -TERM -f "^$PY tutorials/torch_ddp_example.py --generations 50" || kill -TERM $launcher
wait $launcher
rc=$?
echo "CHECK sigterm-nccl: $([ $rc -eq 0 ] && [ $((SECONDS - sent)) -le 12 ] && echo ok || echo FAILED) (exit $rc, $((SECONDS - sent)) s after SIGTERM)"
tail -n 5 "$OUT/sigterm.log"
echo "failures: $failures"
exit $failures
