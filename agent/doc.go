// Package agent runs coding agents for whilly: the Agent adapter interface and its
// built-in adapters (claude, codex, command, sim), the parsers for their outputs, the
// process-group runner that kills an agent and everything it spawned on timeout or
// cancellation, the task prompt with its untrusted-data fences and injection guard,
// secret redaction, and the plan's verification commands.
//
// It owns nothing persistent: it gets a Request and returns a Result, and the caller (the
// worker) decides what the result means for the task. The slim whilly-worker binary depends
// on it, so it must import only the standard library and whilly's plan and sandbox
// packages — never pgx, River, chi, ghinstallation or go-github.
//
// Processes are started in their own process group (Setpgid) so that a timeout, a
// cancelled context or a lost lease can signal the whole group: SIGTERM, a short grace,
// then SIGKILL. A child that leaves the group on purpose (setsid, env -i) escapes this;
// every agent process therefore runs in the sandbox (Config.Sandbox, package sandbox),
// whose pid namespace ends with the attempt and takes every such child with it.
package agent
