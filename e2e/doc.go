// Package e2e holds whilly's end-to-end tests: the real whilly and whilly-worker binaries,
// built once per test run, run as separate processes against a per-test Postgres
// database. They prove what only whole processes can show — that a plan drains exactly
// once when workers are killed with SIGKILL or SIGTERM, when the control plane restarts
// or runs as several replicas, and that no agent process outlives its attempt. The
// package has no code of its own; nothing may import it.
package e2e
