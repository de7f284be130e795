#!/usr/bin/env bash
# Entry script of the whilly GitHub Action (action.yml).
#
#   run.sh resolve decides where whilly-worker comes from: the `version` input, else the
#                  action's own ref when it is a version tag (vX.Y.Z), writes it to the
#                  step output `version`; empty (or `source`) means build from source
#   run.sh build   downloads the release of that version (checksum verified) or builds
#                  whilly-worker from the action's own source, and installs the pinned
#                  claude or codex CLI with npm when the agent needs it
#   run.sh run     runs whilly-worker --drain, then writes tasks-done, tasks-failed,
#                  cost-usd, plan-status and pull-request-url to $GITHUB_OUTPUT and a
#                  summary with a table of the tasks it ran to $GITHUB_STEP_SUMMARY
#
# Inputs come as environment variables set by action.yml: WHILLY_CONTROL_URL,
# WHILLY_WORKER_TOKEN, WHILLY_BOOTSTRAP_TOKEN, WHILLY_PLAN, WHILLY_AGENT (read by
# whilly-worker itself, which keeps every WHILLY_*TOKEN* out of the agent's environment)
# and INPUT_VERSION, INPUT_RELEASE_URL, INPUT_CLAUDE_CODE_VERSION, INPUT_CODEX_VERSION,
# INPUT_WORKER_ID (deprecated, ignored), INPUT_MAX_TASKS, INPUT_TIMEOUT_MINUTES,
# INPUT_LABELS, INPUT_INSTALL_AGENT; ACTION_REF and ACTION_REPOSITORY are the action's own
# ref and repository (github.action_ref, github.action_repository), RELEASE the resolved
# version. Never interpolate an input into this script: they arrive as data.
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
# A release tag: what `version` takes and what makes the action's own ref a release.
tag_re='^v[0-9]+[.][0-9]+[.][0-9]+([-+][0-9A-Za-z.-]+)?$'

# annotate escapes a message for a workflow command (::error::…).
annotate() {
  local s="${1//%/%25}"
  s="${s//$'\r'/%0D}"
  printf '%s' "${s//$'\n'/%0A}"
}

fail() {
  echo "::error title=whilly::$(annotate "$*")" >&2
  exit 2
}

# resolve writes the whilly release to install (the step output `version`): the version
# input, else the action's own ref when it is a release tag (uses: …/action@v0.3.0);
# empty when whilly-worker is built from source (version: source, a branch or commit ref,
# or a local `uses: ./action`).
resolve() {
  local v="${INPUT_VERSION:-}"
  if [ -z "$v" ] && [[ "${ACTION_REF:-}" =~ $tag_re ]]; then
    v="$ACTION_REF"
  fi
  [ "$v" != "source" ] || v=""
  [ -z "$v" ] || [[ "$v" == v* ]] || v="v$v"
  if [ -n "$v" ] && ! [[ "$v" =~ $tag_re ]]; then
    fail "input version must be a release tag such as v0.3.0, or source; got '${INPUT_VERSION:-}'"
  fi
  if [ -n "$v" ]; then
    echo "whilly: whilly-worker $v from its release"
  else
    echo "whilly: whilly-worker built from the action's source"
  fi
  [ -z "${GITHUB_OUTPUT:-}" ] || echo "version=$v" >>"$GITHUB_OUTPUT"
}

# sandbox makes bubblewrap work for the agent's box: installs it when missing,
# and on GitHub's hosted runners lifts Ubuntu 24.04's AppArmor restriction on unprivileged
# user namespaces, which bubblewrap needs (they have sudo without a password). A
# self-hosted runner's kernel settings belong to its admin: there the step stops and says
# what to run. WHILLY_SANDBOX=none in the step's env runs the agent unboxed instead.
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
  local knob="${WHILLY_ACTION_USERNS_KNOB:-/proc/sys/kernel/apparmor_restrict_unprivileged_userns}"
  if [ -r "$knob" ] && [ "$(cat "$knob")" = "1" ]; then
    if [ "${RUNNER_ENVIRONMENT:-}" != "github-hosted" ]; then
      fail "AppArmor on this self-hosted runner keeps bubblewrap from creating the agent's sandbox: have its admin run 'sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0' (and add it to /etc/sysctl.d to keep it), or set WHILLY_SANDBOX=none in the step's env to run the agent unboxed"
    fi
    $sudo sysctl -q -w kernel.apparmor_restrict_unprivileged_userns=0 ||
      echo "::warning title=whilly::AppArmor restricts user namespaces and sysctl could not lift it: the sandbox will not work"
  fi
}

# download installs whilly-worker from the release of version $1: the linux tarball of
# this machine's architecture and SHA256SUMS from the release of the action's repository
# (or INPUT_RELEASE_URL/VERSION/), the tarball checked against its sum before it is opened.
download() {
  local v="$1" arch base name dir want got
  [ "$(uname -s)" = "Linux" ] || fail "whilly-worker runs on Linux runners only, this one is $(uname -s): use runs-on: ubuntu-latest"
  case "$(uname -m)" in
    x86_64 | amd64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) fail "whilly publishes no build for $(uname -m) runners: set the input version to source to build from source" ;;
  esac
  base="${INPUT_RELEASE_URL:-}"
  [ -n "$base" ] || base="${GITHUB_SERVER_URL:-https://github.com}/${ACTION_REPOSITORY:-whilly-go/whilly}/releases/download"
  base="${base%/}/$v"
  name="whilly_${v}_linux_${arch}"
  dir="$(mktemp -d "$tmp/whilly-release.XXXXXX")"
  for f in "$name.tar.gz" SHA256SUMS; do
    curl -fsSL --retry 3 --connect-timeout 20 -o "$dir/$f" "$base/$f" ||
      fail "could not download $base/$f: check that release $v exists, or set the input version to source to build from source"
  done
  want="$(awk -v n="$name.tar.gz" '$2 == n || $2 == "*" n { print $1 }' "$dir/SHA256SUMS")"
  [ -n "$want" ] || fail "the SHA256SUMS of release $v does not list $name.tar.gz: report it to the whilly maintainers"
  got="$(sha256sum "$dir/$name.tar.gz" | awk '{ print $1 }')"
  [ "$want" = "$got" ] || fail "$name.tar.gz from $base does not match its SHA256SUMS (sha256 $got, want $want): do not use it; re-run the job, and report it if it persists"
  tar -xzf "$dir/$name.tar.gz" -C "$dir" "$name/whilly-worker" ||
    fail "$name.tar.gz holds no $name/whilly-worker: report it to the whilly maintainers"
  install -m 0755 "$dir/$name/whilly-worker" "$bin"
  rm -rf "$dir"
  echo "whilly: installed whilly-worker $v ($name.tar.gz, sha256 $got)"
}

# install_agent installs the pinned claude or codex CLI with npm, unless the step's env
# names its own (CLAUDE_BIN, CODEX_BIN) or the one on PATH is already that version.
install_agent() {
  [ "${INPUT_INSTALL_AGENT:-true}" = "true" ] || return 0
  local pkg cmd own input version
  case "${WHILLY_AGENT:-claude}" in
    claude) pkg=@anthropic-ai/claude-code cmd=claude own="${CLAUDE_BIN:-}" input=claude-code-version version="${INPUT_CLAUDE_CODE_VERSION:-}" ;;
    codex) pkg=@openai/codex cmd=codex own="${CODEX_BIN:-}" input=codex-version version="${INPUT_CODEX_VERSION:-}" ;;
    *) return 0 ;;
  esac
  [ -z "$own" ] || return 0
  [[ "$version" =~ ^[0-9]+[.][0-9]+[.][0-9]+([-+][0-9A-Za-z.-]+)?$ ]] ||
    fail "input $input must be an exact version such as 1.2.3, got '$version'"
  if command -v "$cmd" >/dev/null 2>&1 && "$cmd" --version 2>/dev/null | grep -qwF "$version"; then
    echo "whilly: $cmd $version is installed"
    return 0
  fi
  npm install --global --no-fund --no-audit "$pkg@$version" ||
    fail "npm could not install $pkg@$version: check the $input input and that the runner reaches the npm registry"
}

build() {
  sandbox
  mkdir -p "$(dirname "$bin")"
  if [ -n "${RELEASE:-}" ]; then
    download "$RELEASE"
  else
    (cd "$src" && CGO_ENABLED=0 go build -trimpath -o "$bin" ./cmd/whilly-worker)
    echo "whilly: built $bin with $(go version)"
  fi
  install_agent
}

# number NAME VALUE: VALUE must be a non-negative number.
number() {
  [[ "$2" =~ ^[0-9]+([.][0-9]+)?$ ]] || fail "input $1 must be a number, got '$2'"
}

# escape a value for a markdown table cell.
cell() {
  local s="${1//|/\\|}"
  s="${s//$'\r'/ }"
  printf '%s' "${s//$'\n'/ }"
}

# decode undoes the percent-encoding of a value of whilly-worker's report (%7C is |).
decode() {
  local s="${1//\\/\\\\}"
  printf '%b' "${s//%/\\x}"
}

# value KEY FIELD... prints the decoded value of KEY=... among a report line's fields.
value() {
  local key="$1" kv
  shift
  for kv in "$@"; do
    if [[ "$kv" == "$key="* ]]; then
      decode "${kv#*=}"
      return 0
    fi
  done
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
    fail "give the token or the bootstrap-token input"
  fi
  if [ -n "${INPUT_WORKER_ID:-}" ]; then
    echo "::warning title=whilly::the worker-id input is ignored (the worker learns its id from its token): remove it from the workflow"
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
  # stdout (the final counts line) goes to a file; the worker's log (stderr) streams,
  # and a copy is kept for the error annotation.
  local errlog="$tmp/whilly-action-$$.err" fifo="$tmp/whilly-action-$$.fifo"
  rm -f "$fifo" && mkfifo "$fifo"
  tee "$errlog" <"$fifo" >&2 &
  local teepid=$!
  "$bin" "${args[@]}" >"$out" 2>"$fifo" &
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
  wait "$teepid" || true
  rm -f "$fifo"
  cat "$out"

  # The report: the counts line, then a line per task the worker ran and per plan it
  # touched (key=value, values percent-encoded: see WriteReport in worker/report.go).
  local counts line done_n=0 failed_n=0 released_n=0 cost=0 unlisted=0 kv
  local -a f rows=()
  local -A plan_status=() plan_pr=()
  counts="$(grep -E '^tasks_done=' "$out" | tail -n 1 || true)"
  read -ra f <<<"$counts"
  for kv in "${f[@]}"; do
    case "$kv" in
      tasks_done=*) done_n="${kv#*=}" ;;
      tasks_failed=*) failed_n="${kv#*=}" ;;
      tasks_released=*) released_n="${kv#*=}" ;;
      cost_usd=*) cost="${kv#*=}" ;;
      tasks_unlisted=*) unlisted="${kv#*=}" ;;
    esac
  done
  local id
  while IFS= read -r line; do
    read -ra f <<<"$line"
    case "${f[0]:-}" in
      task) rows+=("$line") ;;
      plan)
        id="$(value plan_id "${f[@]}")"
        [ -n "$id" ] || continue
        plan_status[$id]="$(value status "${f[@]}")"
        plan_pr[$id]="$(value pull_request "${f[@]}")"
        ;;
    esac
  done <"$out"
  rm -f "$out"
  # The plan of the outputs: the plan input's, else the only one the worker touched.
  local plan="${WHILLY_PLAN:-}" plan_st="" pr_url=""
  if [ -z "$plan" ] && [ "${#plan_status[@]}" -eq 1 ]; then
    plan="${!plan_status[*]}"
  fi
  if [ -n "$plan" ]; then
    plan_st="${plan_status[$plan]:-}"
    pr_url="${plan_pr[$plan]:-}"
  fi
  [[ "$plan_st" =~ ^[A-Z_]+$ ]] || plan_st=""
  [[ "$pr_url" =~ ^https?://[^[:space:][:cntrl:]]+$ ]] || pr_url=""
  if [ -n "${GITHUB_OUTPUT:-}" ]; then
    {
      echo "tasks-done=$done_n"
      echo "tasks-failed=$failed_n"
      echo "cost-usd=$cost"
      echo "plan-status=$plan_st"
      echo "pull-request-url=$pr_url"
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
      echo "| plan | plan status | tasks done | tasks failed | tasks released | cost (USD) | worker | time |"
      echo "|---|---|---:|---:|---:|---:|---|---:|"
      echo "| $(cell "${plan:-any}") | $(cell "$plan_st") | $(cell "$done_n") | $(cell "$failed_n") | $(cell "$released_n") | $(cell "$cost") | $(cell "$outcome") | $((SECONDS - started)) s |"
      if [ "${#rows[@]}" -gt 0 ]; then
        echo
        echo "| task | status | cost (USD) | pull request |"
        echo "|---|---|---:|---|"
        local status attempts pr
        for line in "${rows[@]}"; do
          read -ra f <<<"$line"
          id="$(value plan_id "${f[@]}")"
          status="$(value status "${f[@]}")"
          attempts="$(value attempts "${f[@]}")"
          [ "${attempts:-1}" = "1" ] || status="$status ($attempts attempts)"
          pr=""
          [ -z "$id" ] || pr="${plan_pr[$id]:-}"
          echo "| $(cell "$id/$(value task_id "${f[@]}")") | $(cell "$status") | $(cell "$(value cost_usd "${f[@]}")") | $(cell "$pr") |"
        done
        [ "$unlisted" = "0" ] || echo "and $(cell "$unlisted") more tasks (the worker lists its first $(cell "${#rows[@]}"))"
      fi
    } >>"$GITHUB_STEP_SUMMARY"
  fi
  if [ -z "$counts" ] && [ "$code" -eq 0 ]; then
    rm -f "$errlog"
    fail "whilly-worker printed no final counts"
  fi
  if [ "$code" -ne 0 ]; then
    # The worker's last word says why it stopped ("whilly-worker: …").
    local why
    why="$(grep -E '^whilly-worker: ' "$errlog" | tail -n 1 || true)"
    why="${why#whilly-worker: }"
    [ -n "$why" ] || why="whilly-worker exited with status $code: see the step's log"
    echo "::error title=whilly::$(annotate "$why")"
  fi
  rm -f "$errlog"
  return "$code"
}

case "${1:-}" in
  resolve) resolve ;;
  build) build ;;
  run) run ;;
  *)
    echo "usage: run.sh resolve | build | run" >&2
    exit 2
    ;;
esac
