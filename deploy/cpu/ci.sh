#!/usr/bin/env bash
# deploy/cpu/ci.sh — the CPU-stack tier, for .ci/run to call.
#
#   1. the tiny model's pytest suite (and ruff)
#   2. deploy/cpu/up.sh into a temporary directory (environment, model, vLLM, trainer)
#   3. grpo run --config DIR/grpo.yaml --steps 3 against it
#   4. checks: vLLM's /v1/models lists the trained adapters, each adapter the
#      trainer wrote is a PEFT LoRA directory, vLLM's metrics saw LoRA requests
#   5. deploy/cpu/down.sh
# Prints the time each phase took, then "ci-stack: 1 passed, 0 failed" (or
# "0 passed, 1 failed"). Run from anywhere; uses `go` from PATH. The trainer
# (deploy/trainer, package grpo_trainer) must be importable: it is put on
# PYTHONPATH by up.sh.
# CI_STACK_STEPS (default 3) sets the number of steps.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
steps="${CI_STACK_STEPS:-3}"
dir="$(mktemp -d "${TMPDIR:-/tmp}/grpo-stack.XXXXXX")"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

t0=$(date +%s)
tp=$t0
timings=()
phase() {
  local now; now=$(date +%s)
  timings+=("$(printf '%-28s %5ss' "$1" "$((now - tp))")")
  echo "ci-stack: $1 done in $((now - tp))s"
  tp=$now
}
report() {
  echo "ci-stack: phase timings"
  local t
  for t in "${timings[@]}"; do echo "  $t"; done
  echo "  $(printf '%-28s %5ss' total "$(($(date +%s) - t0))")"
}
down_done=0
finish() {
  local rc=$?
  if [[ $down_done == 0 ]]; then "$here/down.sh" "$dir" || true; fi
  if [[ $rc != 0 ]]; then
    echo "ci-stack: FAILED (exit $rc); logs in $dir" >&2
    local f
    for f in "$dir"/vllm.log "$dir"/trainer.log "$dir"/run.log; do
      [[ -f "$f" ]] && { echo "---- tail of $f ----" >&2; tail -n 30 "$f" >&2; }
    done
  fi
  report
  # the closing line CI reads
  # a passing run's directory goes (CI_STACK_KEEP=1 keeps it); a failing one's stays for its logs
  if [[ $rc == 0 && "${CI_STACK_KEEP:-0}" != 1 ]]; then rm -rf "$dir"; fi
  if [[ $rc == 0 ]]; then echo "ci-stack: 1 passed, 0 failed"; else echo "ci-stack: 0 passed, 1 failed"; fi
  exit $rc
}
trap finish EXIT

# ---- 1. environment and the builder's tests ----------------------------
venv=$("$here/env.sh")
phase "python environment"

(cd "$repo/deploy/tinymodel" && "$venv/bin/python" -m pytest -q && "$venv/bin/ruff" check . &&
  "$venv/bin/ruff" format --check .)
phase "tinymodel pytest + ruff"

# ---- 2. bring the stack up ---------------------------------------------
"$here/up.sh" "$dir"
phase "up.sh"
# shellcheck disable=SC1091
. "$dir/stack.env"

# ---- 3. train ----------------------------------------------------------
(cd "$repo" && go build -o "$dir/grpo" ./cmd/grpo)
phase "go build"
"$dir/grpo" run --config "$dir/grpo.yaml" --db "$dir/grpo.db" --steps "$steps" 2>&1 | tee "$dir/run.log"
phase "grpo run ($steps steps)"

# ---- 4. checks ---------------------------------------------------------
models=$(curl -fsS "$VLLM_URL/models")
adapters=$("$PYTHON" -c '
import json, sys
ids = [m["id"] for m in json.load(sys.stdin)["data"]]
print(" ".join(i for i in ids if i != sys.argv[1]))' "$MODEL" <<<"$models")
echo "ci-stack: vLLM serves: $MODEL $adapters"
n_adapters=$(wc -w <<<"$adapters")
((n_adapters >= 1)) || { echo "ci-stack: vLLM lists no adapter after $steps steps" >&2; exit 1; }

peft_dirs=$(find "$dir/trainer" -name adapter_config.json -printf '%h\n' | sort)
[[ -n "$peft_dirs" ]] || { echo "ci-stack: the trainer wrote no adapter_config.json under $dir/trainer" >&2; exit 1; }
n_peft=0
while read -r d; do
  [[ -f "$d/adapter_model.safetensors" ]] || { echo "ci-stack: $d has no adapter_model.safetensors" >&2; exit 1; }
  "$PYTHON" -c '
import json, sys
c = json.load(open(sys.argv[1] + "/adapter_config.json"))
assert c.get("peft_type") == "LORA", c.get("peft_type")
assert c.get("r") == 8, c.get("r")' "$d" || { echo "ci-stack: $d is not a rank-8 PEFT LoRA" >&2; exit 1; }
  n_peft=$((n_peft + 1))
done <<<"$peft_dirs"
echo "ci-stack: $n_peft PEFT LoRA directories"

lora_lines=$(curl -fsS "${VLLM_URL%/v1}/metrics" | grep -c '^vllm:lora_requests_info{.*running_lora_adapters="[^"]' || true)
echo "ci-stack: vLLM metrics lines with a running LoRA adapter: $lora_lines"
((lora_lines >= 1)) || { echo "ci-stack: vLLM's metrics show no LoRA request" >&2; exit 1; }
phase "checks"

# ---- 5. down -----------------------------------------------------------
"$here/down.sh" "$dir"
down_done=1
phase "down.sh"
