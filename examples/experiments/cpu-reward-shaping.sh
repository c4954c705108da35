#!/usr/bin/env bash
# examples/experiments/cpu-reward-shaping.sh DIR
#
# Runs examples/experiments/cpu-reward-shaping.yaml.in on the real CPU stack
# and the CPU rows of the coordination-gap table, then stops the stack:
#   1. deploy/cpu/up.sh DIR (vLLM-CPU + the reference trainer; DIR/stack.env)
#   2. fills the template's @...@ with DIR/stack.env into DIR/experiment.yaml
#      and runs `grpo experiment` on it; the report goes to
#      docs/experiments/cpu-reward-shaping/ (OUT= moves it)
#   3. unless GAP=0: the tiny Qwen3 base and the trained adapter of
#      cpu-reward-shaping/shaped/1 (its best step) at n = 5, 10, 15, 30
#      episodes each, on test tables 2000000.. (the coordination-gap table's
#      tables), into docs/experiments/coordination-gap/ (GAP_OUT= moves it);
#      the adapter is measured on a copy of the experiment's store, so the
#      experiment's stored test results stay as they were
#   4. deploy/cpu/down.sh DIR, always (trap)
# Wall times of each part are printed and written to OUT/wall-times.txt.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
mkdir -p "$1"
dir="$(cd "$1" && pwd)"
out="${OUT:-$repo/docs/experiments/cpu-reward-shaping}"
gap_out="${GAP_OUT:-$repo/docs/experiments/coordination-gap}"
mkdir -p "$out" "$gap_out"
# shellcheck source=cpu-stack.sh
. "$here/cpu-stack.sh"
cpu_stack_up

cpu_fill "$here/cpu-reward-shaping.yaml.in" "$dir/experiment.yaml"
t=$(date +%s)
"$grpo" experiment "$dir/experiment.yaml"
echo "grpo experiment (2 arms x 2 seeds, 3 steps, test n=5 x 10 tables): $(($(date +%s) - t)) s" | tee -a "$times"

if [[ "${GAP:-1}" != 0 ]]; then
  t=$(date +%s)
  "$grpo" eval --base-url "$VLLM_URL" --model "$MODEL" --n 5,10,15 --episodes 30 --seed 2000000 \
    --max-tokens 48 --chat-template-kwargs '{}' --concurrency 8 --request-timeout 120s --json \
    >"$gap_out/cpu-tiny-qwen3-base.json"
  echo "grpo eval tiny Qwen3 base (n=5,10,15 x 30): $(($(date +%s) - t)) s" | tee -a "$times"
  cp "$dir/cpu-reward-shaping.db" "$dir/gap.db"
  [[ -d "$dir/cpu-reward-shaping.db.data" ]] && cp -r "$dir/cpu-reward-shaping.db.data" "$dir/gap.db.data"
  t=$(date +%s)
  "$grpo" eval --db "$dir/gap.db" --run cpu-reward-shaping/shaped/1 --step best --n 5,10,15 --episodes 30 \
    --concurrency 8 --request-timeout 120s --json >"$gap_out/cpu-tiny-qwen3-trained.json"
  echo "grpo eval --run cpu-reward-shaping/shaped/1 --step best (n=5,10,15 x 30): $(($(date +%s) - t)) s" | tee -a "$times"
fi
echo "total: $(($(date +%s) - t0)) s" | tee -a "$times"
