#!/usr/bin/env bash
# examples/experiments/coordination-gap.sh [DIR]
#
# Experiment 4, the coordination-gap table: `grpo eval` of several models at
# n = 5, 10 and 15 with 30 episodes each, every model on the same tables
# (seeds 2000000..2000029 at every n: --seed 2000000 for grpo eval, the
# test split of a run with test.seed 2000000 for grpo eval --run).
#
# This script measures the embedded reference backend's models, in-process:
#   embedded-base.json          the base policy at its default strength
#   embedded-base-study.json    the base at the study-regime strength
#                               (trainer.base_coordination, STUDY_COORDINATION,
#                               default -0.7 as calibrated in docs/CONFIG.md;
#                               skipped when this build has no such knob)
#   embedded-trained-study.json the best checkpoint of the same 16-step run
#                               on that base (coordination-gap/run-study.yaml;
#                               base_coordination must match STUDY_COORDINATION)
#   embedded-trained.json       the best-validation checkpoint of a 16-step run
#                               (examples/experiments/coordination-gap/run.yaml)
# The CPU stack's rows (cpu-tiny-qwen3-base.json, cpu-tiny-qwen3-trained.json)
# are measured by examples/experiments/cpu-reward-shaping.sh; the rows of
# real endpoints by the command in coordination-gap/endpoints.yaml.
# Then it writes table.md from every *.json in OUT (TABLE_ONLY=1: only that).
#   DIR  scratch directory for the run's store (default: a temporary one)
#   OUT  default docs/experiments/coordination-gap
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dir="${1:-$(mktemp -d)}"
mkdir -p "$dir"
out="${OUT:-$repo/docs/experiments/coordination-gap}"
mkdir -p "$out"
grpo="${GRPO:-$dir/grpo}"
[[ -n "${GRPO:-}" ]] || (cd "$repo" && go build -o "$grpo" ./cmd/grpo)
table=(--n 5,10,15 --episodes 30)
study="${STUDY_COORDINATION:--0.7}"
if [[ "${TABLE_ONLY:-0}" == 1 ]]; then :; else

t=$(date +%s)
"$grpo" eval "${table[@]}" --seed 2000000 --json >"$out/embedded-base.json"
echo "embedded base: $(($(date +%s) - t)) s"
if "$grpo" eval -h 2>&1 | grep -q -- --base-coordination; then
  t=$(date +%s)
  "$grpo" eval "${table[@]}" --seed 2000000 --base-coordination "$study" --json >"$out/embedded-base-study.json"
  echo "embedded base, study strength $study: $(($(date +%s) - t)) s"
  t=$(date +%s)
  rm -f "$dir/gap-study.db"; rm -rf "$dir/gap-study.db.data"
  "$grpo" run --config "$here/coordination-gap/run-study.yaml" --db "$dir/gap-study.db" >"$dir/run-study.txt"
  "$grpo" eval --db "$dir/gap-study.db" --run coordination-gap/embedded-study --step best "${table[@]}" --json >"$out/embedded-trained-study.json"
  echo "embedded trained, study strength (16-step run + eval --run): $(($(date +%s) - t)) s"
else
  echo "this build has no --base-coordination: the study-strength base is left out" >&2
fi
t=$(date +%s)
rm -f "$dir/gap.db"; rm -rf "$dir/gap.db.data"
"$grpo" run --config "$here/coordination-gap/run.yaml" --db "$dir/gap.db" >"$dir/run.txt"
"$grpo" eval --db "$dir/gap.db" --run coordination-gap/embedded --step best "${table[@]}" --json >"$out/embedded-trained.json"
echo "embedded trained (16-step run + eval --run): $(($(date +%s) - t)) s"
fi

# table.md: one row per model and n, from every result file.
{
  echo "| model | n | episodes | reward | 95% CI | deadlock | meals | invalid | errored |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for f in "$out"/embedded-base.json "$out"/embedded-trained.json "$out"/embedded-base-study.json "$out"/embedded-trained-study.json \
           "$out"/cpu-tiny-qwen3-base.json "$out"/cpu-tiny-qwen3-trained.json "$out"/gpu-*.json; do
    [[ -f "$f" ]] || continue
    jq -r --arg file "$(basename "$f" .json)" '
      def fmt(d): . as $x | (($x | fabs) * pow(10; d) | round | tostring) as $s
        | (if ($s | length) <= d then ([range(0; d + 1 - ($s | length))] | map("0") | join("")) + $s else $s end) as $p
        | (if $x < 0 and ($s | tonumber) > 0 then "-" else "" end) + $p[0:($p | length) - d] + "." + $p[($p | length) - d:];
      .results[] |
      "| \($file): \(.model)\(if .selected_by then " (" + .selected_by + ")" else "" end) | \(.n) | \(.episodes) | \(.reward.mean | fmt(3)) | [\(.reward.ci95[0] | fmt(3)), \(.reward.ci95[1] | fmt(3))] | \(.deadlock_rate | fmt(2)) | \(.meals_mean | fmt(2)) | \(.invalid_rate | fmt(3)) | \(.errored) |"' "$f"
  done
} >"$out/table.md"
cat "$out/table.md"
