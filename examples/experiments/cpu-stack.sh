# examples/experiments/cpu-stack.sh: sourced by the drivers of the
# experiments on the CPU stack (cpu-reward-shaping.sh, cpu-learning.sh)
# once they have set repo, dir (the stack's directory) and out (where the
# report goes; out_paper too for cpu-learning):
#   cpu_stack_up       builds grpo into $grpo (GRPO= gives one instead),
#                      starts the stack in $dir with deploy/cpu/up.sh (it is
#                      stopped by down.sh when the driver exits), loads
#                      $dir/stack.env and starts $times, the wall-times file
#   cpu_fill IN OUT    fills template IN's @...@ placeholders into OUT
cpu_stack_up() {
  grpo="${GRPO:-$dir/grpo}"
  [[ -n "${GRPO:-}" ]] || (cd "$repo" && go build -o "$grpo" ./cmd/grpo)
  # shellcheck disable=SC2154 # repo and dir are the driver's
  trap '"$repo/deploy/cpu/down.sh" "$dir"' EXIT INT TERM
  times="$out/wall-times.txt"
  : >"$times"
  t0=$(date +%s)
  "$repo/deploy/cpu/up.sh" "$dir"
  echo "up.sh: $(($(date +%s) - t0)) s" | tee -a "$times"
  # shellcheck disable=SC1091
  . "$dir/stack.env"
}

cpu_fill() {
  sed -e "s|@VLLM_URL@|$VLLM_URL|g" -e "s|@TRAINER_URL@|$TRAINER_URL|g" -e "s|@MODEL@|$MODEL|g" \
      -e "s|@MODEL_DIR@|$MODEL_DIR|g" -e "s|@DIR@|$dir|g" -e "s|@OUT@|$out|g" -e "s|@OUT_PAPER@|${out_paper:-}|g" \
      "$1" >"$2"
}
