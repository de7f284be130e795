#!/usr/bin/env bash
# Entry script of the whilly GitHub Action (action.yml).
#
#   run.sh build   builds whilly-worker from the action's own source (and installs the
#                  claude or codex CLI with npm when the agent needs it and it is missing)
#   run.sh run     runs whilly-worker --drain, then writes tasks-done, tasks-failed and
#                  cost-usd to $GITHUB_OUTPUT and a summary to $GITHUB_STEP_SUMMARY
#
# Inputs come as environment variables set by action.yml: WHILLY_CONTROL_URL,
# WHILLY_WORKER_TOKEN, WHILLY_WORKER_ID, WHILLY_BOOTSTRAP_TOKEN, WHILLY_PLAN, WHILLY_AGENT
# (read by whilly-worker itself, which keeps every WHILLY_*TOKEN* out of the agent's
# environment) and INPUT_MAX_TASKS, INPUT_TIMEOUT_MINUTES, INPUT_LABELS,
# INPUT_INSTALL_AGENT. Never interpolate an input into this script: they arrive as data.
# The bootstrap token goes to whilly-worker in a private file (--bootstrap-token-file, which
# the worker deletes once read), never in its environment: a process's initial environment
# stays readable in /proc/PID/environ for as long as it runs.
# WHILLY_WORKER_BIN sets where the binary is built (default under $RUNNER_TEMP), and
# WHILLY_WORKSPACE_DIR where the checkouts go (default $RUNNER_TEMP/whilly-workspaces).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(dirname "$here")"
tmp="${RUNNER_TEMP:-${TMPDIR:-/tmp}}"
bin="${WHILLY_WORKER_BIN:-$tmp/whilly-action/whilly-worker}"

fail() {
  echo "::error title=whilly::$*" >&2
  exit 2
}

# sandbox makes bubblewrap work for the agent's box (SPEC §16) where the runner allows it:
# installs it when missing, and lifts Ubuntu 24.04's AppArmor restriction on unprivileged
# user namespaces, which GitHub's runners keep on and bubblewrap needs. Both need sudo
# without a password, as GitHub's hosted runners have; without it whilly-worker says what
# is missing and exits 2 (or set WHILLY_SANDBOX=none in the step's env to run unboxed).
sandbox() {
  [ "${WHILLY_AGENT:-claude}" = "sim" ] && return 0
  [ "${WHILLY_SANDBOX:-}" = "none" ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || { sudo -n true 2>/dev/null && sudo="sudo -n"; }
  if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    $sudo apt-get install -y -q bubblewrap >/dev/null 2>&1 ||
      { $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q bubblewrap >/dev/null 2>&1; } ||
      echo "::warning title=whilly::could not install bubblewrap"
  fi
  local knob=/proc/sys/kernel/apparmor_restrict_unprivileged_userns
  if [ -r "$knob" ] && [ "$(cat "$knob")" = "1" ]; then
    $sudo sysctl -q -w kernel.apparmor_restrict_unprivileged_userns=0 ||
      echo "::warning title=whilly::AppArmor restricts user namespaces and sysctl could not lift it: the sandbox will not work"
  fi
}

build() {
  sandbox
  mkdir -p "$(dirname "$bin")"
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -o "$bin" ./cmd/whilly-worker)
  echo "whilly: built $bin with $(go version)"
  if [ "${INPUT_INSTALL_AGENT:-true}" = "true" ]; then
    case "${WHILLY_AGENT:-claude}" in
      claude) command -v "${CLAUDE_BIN:-claude}" >/dev/null 2>&1 || npm install --global --no-fund --no-audit @anthropic-ai/claude-code ;;
      codex) command -v "${CODEX_BIN:-codex}" >/dev/null 2>&1 || npm install --global --no-fund --no-audit @openai/codex ;;
    esac
  fi
}

# number NAME VALUE: VALUE must be a non-negative number.
number() {
  [[ "$2" =~ ^[0-9]+([.][0-9]+)?$ ]] || fail "input $1 must be a number, got '$2'"
}

# escape a value for a markdown table cell.
cell() {
  local s="${1//|/\\|}"
  printf '%s' "${s//$'\n'/ }"
}

# hide_bootstrap moves the bootstrap token from the environment into a private file and
# runs this script again without it: exec replaces this process, so its
# /proc/PID/environ no longer shows the token (action.yml execs this script for the same
# reason). whilly-worker reads the file (WHILLY_BOOTSTRAP_TOKEN_FILE) and deletes it.
hide_bootstrap() {
  local f
  f="$(umask 077 && mktemp "$tmp/whilly-bootstrap.XXXXXX")"
  printf '%s\n' "$WHILLY_BOOTSTRAP_TOKEN" >"$f" # printf is a builtin: no argv shows it
  exec env -u WHILLY_BOOTSTRAP_TOKEN WHILLY_BOOTSTRAP_TOKEN_FILE="$f" bash "${BASH_SOURCE[0]}" run
}

run() {
  [ -z "${WHILLY_BOOTSTRAP_TOKEN:-}" ] || hide_bootstrap
  # The worker deletes the file once read; this covers a run that ends before it starts.
  [ -z "${WHILLY_BOOTSTRAP_TOKEN_FILE:-}" ] || trap 'rm -f "$WHILLY_BOOTSTRAP_TOKEN_FILE"' EXIT
  [ -n "${WHILLY_CONTROL_URL:-}" ] || fail "the control-url input is required"
  if [ -z "${WHILLY_WORKER_TOKEN:-}" ] && [ -z "${WHILLY_BOOTSTRAP_TOKEN_FILE:-}" ]; then
    fail "give the token (with worker-id) or the bootstrap-token input"
  fi
  if [ -n "${WHILLY_WORKER_TOKEN:-}" ] && [ -z "${WHILLY_WORKER_ID:-}" ]; then
    fail "the token input needs the worker-id input"
  fi
  [ -x "$bin" ] || fail "whilly-worker is not built ($bin); run 'run.sh build' first"
  local max_tasks="${INPUT_MAX_TASKS:-0}" minutes="${INPUT_TIMEOUT_MINUTES:-0}"
  max_tasks="${max_tasks:-0}" minutes="${minutes:-0}"
  number max-tasks "$max_tasks"
  number timeout-minutes "$minutes"
  [[ "$max_tasks" =~ ^[0-9]+$ ]] || fail "input max-tasks must be a whole number, got '$max_tasks'"

  local args=(--drain --max-tasks "$max_tasks")
  [ -n "${INPUT_LABELS:-}" ] && args+=(--labels "$INPUT_LABELS")
  export WHILLY_WORKSPACE_DIR="${WHILLY_WORKSPACE_DIR:-$tmp/whilly-workspaces}"

  local out="$tmp/whilly-action-$$.out"
  local started=$SECONDS timed_out="$tmp/whilly-action-$$.timeout"
  rm -f "$timed_out"
  # stdout (the final counts line) goes to a file; the worker's log (stderr) streams.
  "$bin" "${args[@]}" >"$out" &
  local pid=$! watchdog=""
  # Job cancellation: pass the signal on so the worker releases its task, then wait.
  trap 'kill -TERM "$pid" 2>/dev/null || true' INT TERM
  local seconds
  seconds="$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 + 0.5 }')"
  if [ "$seconds" -gt 0 ]; then
    (
      trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
      sleep "$seconds" &
      sleeper=$!
      wait "$sleeper"
      : >"$timed_out"
      echo "::warning title=whilly::timeout-minutes ($minutes) reached; the worker hands its task back and stops" >&2
      kill -TERM "$pid" 2>/dev/null || true
    ) &
    watchdog=$!
  fi
  local code=0
  while :; do
    code=0
    wait "$pid" || code=$?
    # A trapped signal interrupts wait while the worker is still stopping: wait again.
    kill -0 "$pid" 2>/dev/null || break
  done
  trap - INT TERM
  if [ -n "$watchdog" ]; then
    kill -TERM "$watchdog" 2>/dev/null || true
    wait "$watchdog" 2>/dev/null || true
  fi
  cat "$out"

  local line done_n=0 failed_n=0 released_n=0 cost=0 kv
  line="$(grep -E '^tasks_done=' "$out" | tail -n 1 || true)"
  rm -f "$out"
  for kv in $line; do
    case "$kv" in
      tasks_done=*) done_n="${kv#*=}" ;;
      tasks_failed=*) failed_n="${kv#*=}" ;;
      tasks_released=*) released_n="${kv#*=}" ;;
      cost_usd=*) cost="${kv#*=}" ;;
    esac
  done
  if [ -n "${GITHUB_OUTPUT:-}" ]; then
    {
      echo "tasks-done=$done_n"
      echo "tasks-failed=$failed_n"
      echo "cost-usd=$cost"
    } >>"$GITHUB_OUTPUT"
  fi
  local outcome="finished"
  if [ -e "$timed_out" ]; then
    outcome="stopped at timeout-minutes ($minutes)"
    rm -f "$timed_out"
  elif [ "$code" -ne 0 ]; then
    outcome="exited with status $code"
  fi
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    {
      echo "### whilly worker"
      echo
      echo "| plan | tasks done | tasks failed | tasks released | cost (USD) | worker | time |"
      echo "|---|---:|---:|---:|---:|---|---:|"
      echo "| $(cell "${WHILLY_PLAN:-any}") | $done_n | $failed_n | $released_n | $cost | $(cell "$outcome") | $((SECONDS - started)) s |"
    } >>"$GITHUB_STEP_SUMMARY"
  fi
  if [ -z "$line" ] && [ "$code" -eq 0 ]; then
    fail "whilly-worker printed no final counts"
  fi
  return "$code"
}

case "${1:-}" in
  build) build ;;
  run) run ;;
  *)
    echo "usage: run.sh build | run" >&2
    exit 2
    ;;
esac
