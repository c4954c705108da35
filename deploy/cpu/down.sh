#!/usr/bin/env bash
# deploy/cpu/down.sh DIR
#
# Stops the vLLM server and the trainer that deploy/cpu/up.sh DIR started, by
# the process ids in DIR/stack.env: SIGTERM to each one's process group (vLLM
# runs an engine core and a worker beside its API server), then waits, then
# SIGKILL for what is left after DOWN_TIMEOUT seconds (default 30), and up to
# 30 s more for the kernel to tear it down. Safe to
# run twice: processes already gone are skipped. Exits non-zero, naming the
# part, if one could not be stopped.
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
dir="$1"
env_file="$dir/stack.env"
if [[ ! -f "$env_file" ]]; then
  echo "down: nothing to stop: no $env_file"
  exit 0
fi
VLLM_PID="" TRAINER_PID=""
# shellcheck disable=SC1090
. "$env_file"
timeout="${DOWN_TIMEOUT:-30}"

# A killed process stays visible to kill -0 as a zombie until its parent
# reaps it (for a daemon started by up.sh, PID 1, which may take its time on
# a loaded machine): a zombie runs nothing and counts as stopped.
running() { [[ -r "/proc/$1/stat" ]] && [[ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]]; }
alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null && running "$1"; }
group_alive() {
  [[ -n "$1" ]] || return 1
  local p
  for p in $(pgrep -g "$1" 2>/dev/null); do running "$p" && return 0; done
  return 1
}

status=0
stop() { # part pid marker
  local part=$1 pid=$2 marker=$3
  if ! alive "$pid" && ! group_alive "$pid"; then
    echo "down: $part: not running${pid:+ (pid $pid)}"
    return 0
  fi
  # a pid reused by another program is not ours to stop
  if alive "$pid" && ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$marker"; then
    echo "down: $part: pid $pid is no longer $part (its command lacks '$marker'); not touching it"
    return 0
  fi
  # up.sh starts each part with setsid, so its pid is its process group id
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < timeout; i++)); do
    group_alive "$pid" || alive "$pid" || { echo "down: $part: stopped (pid $pid)"; return 0; }
    sleep 1
  done
  echo "down: $part: still running after ${timeout}s; SIGKILL" >&2
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  # a process with gigabytes mapped takes a while to be torn down when the
  # machine is busy
  for ((i = 0; i < 30; i++)); do
    group_alive "$pid" || alive "$pid" || break
    sleep 1
  done
  if group_alive "$pid" || alive "$pid"; then
    echo "down: FAILED: $part: pid $pid survives SIGKILL" >&2
    status=1
  else
    echo "down: $part: killed (pid $pid)"
  fi
}

stop trainer "$TRAINER_PID" grpo_trainer
stop vllm "$VLLM_PID" vllm.entrypoints
exit $status
