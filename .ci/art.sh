#!/usr/bin/env bash
# .ci/art.sh [RELEASE...]
#
# grpo against OpenPipe ART's real `art run` app. For each release (default:
# every published release of the supported band, plus two outside it):
# openpipe-art is installed with --no-deps into its own directory over one
# small environment (.ci/art/requirements.txt), both cached under
# $GRPO_CACHE (default ~/.cache/grpo) keyed by a content hash of the pins
# and the release. .ci/art/harness.py serves the release's own FastAPI app
# with a recording LocalBackend that runs the release's own
# tokenize_trajectory_groups; the inference side is `grpo refmodel serve`.
#
# In the band, `grpo run` trains two steps through it and .ci/art/check.py
# reads what the app validated. Outside it, `grpo run` must refuse the server
# at start naming the band. Prints "art-tier: N passed, M failed" last.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
band=(0.4.0 0.4.1 0.4.2 0.4.3 0.4.4 0.4.5 0.4.7 0.4.8 0.4.9 0.4.10 0.4.11 0.4.12 0.5.0)
outside=(0.5.3 0.5.9)
releases=("$@")
[[ ${#releases[@]} -gt 0 ]] || releases=("${band[@]}" "${outside[@]}")

py="${GRPO_PYTHON:-python3.11}"
command -v "$py" >/dev/null || { echo "art-tier: no $py on PATH (set GRPO_PYTHON to a Python 3.11)" >&2; exit 1; }
cache="${GRPO_CACHE:-$HOME/.cache/grpo}"
mkdir -p "$cache" .ci/artifacts
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

# venv_for V: the environment release V is served from, built once per
# content of its requirements file (0.5.6 and later import more at start).
venv_for() {
  local req=.ci/art/requirements.txt
  case "$1" in 0.5.[6-9] | 0.5.[1-9][0-9]) req=.ci/art/requirements-0.5.6.txt ;; esac
  local key venv
  key=$( (cat "$req"; "$py" -c 'import sys; print(sys.version_info[:2])') | sha256sum | cut -c1-12)
  venv="$cache/art-venv-$key"
  (
    flock 9
    if [[ ! -f "$venv/.complete" ]]; then
      echo "art-tier: creating $venv" >&2
      rm -rf "$venv"
      { "$py" -m venv "$venv" && "$venv/bin/pip" install --disable-pip-version-check -q -r "$req"; } \
        >>.ci/artifacts/art-pip.log 2>&1 || { rm -rf "$venv"; exit 1; }
      touch "$venv/.complete"
    fi
  ) 9>"$cache/.art-venv-$key.lock" || { echo "art-tier: pip install -r $req failed (.ci/artifacts/art-pip.log)" >&2; return 1; }
  echo "$venv"
}

# release_dir VENV V: openpipe-art==V alone, installed once beside VENV.
release_dir() {
  local d="$1-openpipe-art-$2"
  if [[ ! -f "$d/.complete" ]]; then
    rm -rf "$d"
    "$1/bin/pip" install --disable-pip-version-check -q --no-deps --target "$d" "openpipe-art==$2" \
      >>.ci/artifacts/art-pip.log 2>&1 || return 1
    touch "$d/.complete"
  fi
  echo "$d"
}

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_http URL: up to a minute for URL to answer at all.
wait_http() {
  for _ in $(seq 120); do
    curl -s -o /dev/null "$1" && return 0
    sleep 0.5
  done
  return 1
}

/usr/local/go/bin/go build -o "$work/grpo" ./cmd/grpo || { echo "art-tier: go build failed" >&2; exit 1; }

ref_port=$(free_port)
"$work/grpo" refmodel serve --addr "127.0.0.1:$ref_port" --data-dir "$work/refmodel" >"$work/refmodel.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$ref_port/health" || { echo "art-tier: grpo refmodel serve did not start" >&2; cat "$work/refmodel.log" >&2; exit 1; }

# start_art V: serves release V's app in the background, recording into
# $work/V.record; art_pid[V] and art_port[V] say where. The next release is
# started while the current one runs: most of a release's time is Python
# importing its app.
declare -A art_pid art_port art_venv
start_art() {
  local v=$1 venv d
  [[ -n "${art_port[$v]:-}" ]] && return 0
  art_port[$v]=none
  venv=$(venv_for "$v") && d=$(release_dir "$venv" "$v") || return 1
  art_venv[$v]=$venv
  art_port[$v]=$(free_port)
  PYTHONPATH="$d" "$venv/bin/python" .ci/art/harness.py --port "${art_port[$v]}" \
    --refmodel "http://127.0.0.1:$ref_port/v1" --record "$work/$v.record" >"$work/$v.art.log" 2>&1 &
  art_pid[$v]=$!
  pids+=($!)
}

passed=0 failed=0
for i in "${!releases[@]}"; do
  v=${releases[$i]}
  in_band=0
  for b in "${band[@]}"; do [[ $b == "$v" ]] && in_band=1; done
  log="$work/$v.log"
  rec="$work/$v.record"
  start_art "$v"
  [[ $((i + 1)) -lt ${#releases[@]} ]] && start_art "${releases[$((i + 1))]}"
  if [[ ${art_port[$v]} == none ]]; then
    echo "art-tier: $v: FAIL: installing openpipe-art==$v"; failed=$((failed + 1)); continue
  fi
  port=${art_port[$v]} art_pid=${art_pid[$v]} venv=${art_venv[$v]}
  if ! wait_http "http://127.0.0.1:$port/healthcheck"; then
    echo "art-tier: $v: FAIL: the art run app did not start"; tail -20 "$work/$v.art.log"
    failed=$((failed + 1)); kill "$art_pid"; continue
  fi
  sed -e "s|@URL@|http://127.0.0.1:$port|" -e "s|@NAME@|art-${v//./-}|" .ci/art/grpo.yaml >"$work/$v.yaml"
  if (cd "$work" && ./grpo run --config "$v.yaml" --db "$work/$v.db") >"$log" 2>&1; then ok=1; else ok=0; fi
  if [[ $in_band == 1 ]]; then
    if [[ $ok == 1 ]] && "$venv/bin/python" .ci/art/check.py "$rec" "$v" 16 >>"$log" 2>&1; then
      echo "art-tier: $v: ok (trained 2 steps; $(tail -1 "$log"))"; passed=$((passed + 1))
    else
      echo "art-tier: $v: FAIL"; tail -15 "$log"; tail -15 "$work/$v.art.log"; failed=$((failed + 1))
    fi
  else
    if [[ $ok == 0 ]] && grep -q "supported: .*0.4.0 to 0.5.0" "$log"; then
      echo "art-tier: $v: ok (refused at start: $(grep -o 'openpipe-art [^;]*' "$log" | head -1))"; passed=$((passed + 1))
    else
      echo "art-tier: $v: FAIL: not refused at start with the band"; tail -30 "$log"; failed=$((failed + 1))
    fi
  fi
  kill $art_pid 2>/dev/null
  wait $art_pid 2>/dev/null
  cp "$log" "$rec" .ci/artifacts/ 2>/dev/null
done
echo "art-tier: $passed passed, $failed failed"
[[ $failed == 0 ]]
