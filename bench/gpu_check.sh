#!/usr/bin/env bash
# LLM training on one GPU through the real runner, in one short call (~6 minutes):
#   (0) the card and its bf16 matmul ceiling,
#   (a) a ~1B Llama (preset 1b) in bf16 autocast + SDPA + per-block torch.compile, strategy single,
#   (b) the same under torchrun as a 1-rank nccl DDP job,
#   (c) the same under DeepSpeed ZeRO-2 (bf16) if deepspeed imports,
#   (d) if time is left, the workload in a bare loop (bench/llm_throughput.py --via direct).
# Each prints tokens/s and MFU (vs the 989 TFLOP/s datasheet peak and the ~790 measured one).
# Results land in $OUT (default /tmp/gpu_check): summary.txt, a.json .. d.json, gpu.log.
#
# Missing packages (pydantic, deepspeed, hjson) travel as wheels in .whl/ (see docs/LLM.md).
# Python: .venv/bin/python when the checkout has one, else python3; PYTHON=/path/to/python picks another.
# Usage from the repo root:  bash bench/gpu_check.sh            (throughput: a-d)
#                            bash bench/gpu_check.sh features   (LoRA + merge, GPT-2: e-f)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
LOG="$OUT/gpu.log"
START=$SECONDS
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=true
# the project's venv when there is one (make run / make test made it), else python3 (a bare GPU image)
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=${PYTHON:-python3}; fi

if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$LOG" 2>&1 || echo "wheel install failed" | tee -a "$LOG"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

if ! PYTHONPATH=${PYTHONPATH:-} $PY -c 'import torch' 2>/dev/null; then
  echo "bench/gpu_check.sh: $PY cannot import torch; run it from a checkout with .venv (make run), or set PYTHON=/path/to/python" | tee -a "$LOG"
  exit 2
fi

# checkpoints of a 1B model with AdamW state are ~12 GB: keep them in RAM, delete after each run
WORK=/tmp/llm-gpu-check
if [ -d /dev/shm ] && [ "$(df -Pk /dev/shm | awk 'NR==2{print $4}')" -gt 41943040 ]; then WORK=/dev/shm/llm-gpu-check; fi
mkdir -p "$WORK"

{
  echo "== $(date -u +%FT%TZ) $(hostname)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  $PY - <<'EOF'
import torch, transformers, peft, pydantic
print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__,
      "pydantic", pydantic.__version__)
try:
    import deepspeed; print("deepspeed", deepspeed.__version__)
except Exception as exc:
    print("deepspeed unavailable:", exc)
if not torch.cuda.is_available():
    raise SystemExit("no CUDA device")
a, b = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
for _ in range(3): a @ b
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(20): a @ b
e.record(); torch.cuda.synchronize()
print(f"bf16 matmul 8192^3 (random data): {2 * 8192**3 * 20 / (s.elapsed_time(e) / 1e3) / 1e12:.0f} TFLOP/s")
EOF
} 2>&1 | tee -a "$LOG"

# RUN_ARGS lets the same flow be dry-run on a CPU box, e.g. RUN_ARGS="--size tiny --seq-len 64 --batch 4 --device cpu"
read -r -a COMMON <<< "${RUN_ARGS:---size 1b --seq-len 2048 --batch 16 --precision bf16 --device cuda} --log-every 5"

BUDGET=${BUDGET:-420}  # seconds for the whole script; each run gets what is left, capped

run() {  # name, cap in seconds, extra args...
  local name=$1 cap=$2; shift 2
  local left=$((BUDGET - (SECONDS - START) - 15))
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -lt 45 ]; then echo "== ($name) skipped: out of time" | tee -a "$LOG"; return 1; fi
  rm -rf "$WORK/$name"
  echo "== ($name) $* [t=$((SECONDS - START))s, limit ${cap}s]" | tee -a "$LOG"
  timeout -k 10 "$cap" $PY bench/llm_throughput.py "${COMMON[@]}" "$@" --work-dir "$WORK/$name" \
    --out "$OUT/$name.json" >>"$LOG" 2>&1
  local rc=$?
  rm -rf "$WORK/$name"
  echo "   ($name) exit $rc [t=$((SECONDS - START))s]" | tee -a "$LOG"
  return $rc
}

if [ "${1:-}" = features ]; then
  # GPU paths the throughput runs do not take: LoRA on a saved base model with activation
  # checkpointing and the merged model reloaded without peft (e), GPT-2 compiled (f).
  NAMES=ef
  read -r -a FEAT <<< "${FEATURE_ARGS:---size 125m --batch 8}"
  run e 120 "${FEAT[@]}" --steps 20 --lora 16 --base-model --grad-ckpt --compile
  run f 120 "${FEAT[@]}" --steps 20 --arch gpt2 --compile
else
NAMES=abcd
COMPILE=--compile
run a 170 --steps 30 --strategy single $COMPILE || { COMPILE=; run a 100 --steps 15 --strategy single; }
run b 130 --steps 20 --strategy ddp $COMPILE
if $PY -c "import deepspeed" >/dev/null 2>&1; then
  run c 130 --steps 20 --strategy deepspeed --zero-stage 2 $COMPILE \
    || { [ -n "$COMPILE" ] && run c 90 --steps 10 --strategy deepspeed --zero-stage 2; }
else
  echo "(c) skipped: deepspeed does not import" | tee -a "$LOG"
fi
# (d) if time is left: the workload in a bare loop (fused AdamW, no checkpoint/eval/logging)
run d 100 --steps 15 --via direct $COMPILE
fi

$PY - "$OUT" "$NAMES" <<'EOF' | tee "$OUT/summary.txt"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
print(f"{'run':4} {'what':22} {'compile':8} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU/989':>8} {'MFU/790':>8} {'eval_loss':>9}")
for name in sys.argv[2]:
    f = out / f"{name}.json"
    if not f.exists():
        print(f"{name:4} (no result; see gpu.log)")
        continue
    r = json.loads(f.read_text())
    label = r['strategy'] if r.get('via') != 'direct' else 'direct'
    label += f" {r['arch']}-{r['size']}" + (f" lora{r['lora']}" if r.get('lora') else "")
    print(f"{name:4} {label:22} {str(r['compile']):8} {r['tokens_per_s']:10.0f} "
          f"{r['achieved_tflops_per_device']:8.1f} {r.get('mfu_vs_peak', 0):8.1%} "
          f"{r.get('mfu_vs_measured_790', 0):8.1%} {r.get('eval_loss') or float('nan'):9.3f}")
    print(f"     params {r['params']:,} flops/token {r['flops_per_token']:.3e} windows "
          f"{[round(x) for x in r.get('tokens_per_s_windows', [])]} wall {r.get('wall_seconds')}s"
          + (f" merged_loads_without_peft={r['merged_loads_without_peft']}" if "merged_loads_without_peft" in r else ""))
EOF
echo "total $((SECONDS - START))s" | tee -a "$LOG"
