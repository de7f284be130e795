// Package sandbox is the box every agent process of whilly runs in: the task
// agent, its plan's verification commands, the planner and the failure analyzer, on
// workers and on the control plane alike.
//
// With bubblewrap (bwrap) the agent gets new user, pid, ipc, uts and network namespaces;
// the workspace read-write; a private HOME seeded only with the agent's own configuration
// (its login read-only and without refresh tokens; nothing flows back); read-only system
// directories (what other users may not read stays hidden), toolchains and the agent's
// own command, and nothing else of the worker's files; its own
// /proc and /tmp; and an environment built from an allow-list (Env). When the attempt
// ends the pid namespace dies, and every process the agent left behind with it. Its
// network namespace holds only loopback: an HTTP proxy that the worker runs outside
// (proxy.go), reached through a unix socket bound into the box and bridged to a loopback
// port by the box's own init (init.go, the worker's executable run again), lets CONNECT
// tunnels (whose TLS server name must be their host) and plain-HTTP requests (each one
// checked) through to the allowed hosts only, and reports every other host. The allowed
// hosts are the model API's, the package registries the worker itself is configured for
// (registries.go, whose settings the box's clients also get) and the operator's; the
// proxy reaches them through the worker's own HTTP proxy when it has one (upstream.go).
//
// The box runs as an unprivileged user without capabilities, even for a root worker,
// under a seccomp filter (seccomp_linux.go); in a cgroup of its own with memory and
// process limits where the worker may make one (cgroup_linux.go), and with its checkout,
// HOME and /tmp (on disk) held to a disk limit by a monitor (limits.go). Going over one
// kills the box, and Cmd.Exceeded names the limit.
//
// The package owns no state beyond one attempt's temporary directory, and imports only
// the standard library and golang.org/x/sys: the slim whilly-worker binary depends on it.
package sandbox
