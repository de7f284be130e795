package worker

import (
	"slices"
	"strings"
	"testing"
)

// The git commands of a workspace run with a clean environment: the worker's tokens and
// the agent's keys never reach git (nor an ssh or a helper git starts); what git needs to
// reach the remote (PATH, the proxy, TLS settings) does.
func TestGitGetsACleanEnvironment(t *testing.T) {
	for k, v := range map[string]string{
		"WHILLY_WORKER_TOKEN": "worker-secret", "ANTHROPIC_API_KEY": "agent-secret", "AWS_SECRET_ACCESS_KEY": "cloud-secret",
		"HTTPS_PROXY": "http://proxy.example:3128", "no_proxy": "localhost", "SSL_CERT_FILE": "/etc/ssl/ca.pem",
		"GIT_SSL_CAINFO": "/etc/ssl/git-ca.pem", "GIT_DIR": "/elsewhere", "LANG": "C.UTF-8",
	} {
		t.Setenv(k, v)
	}
	env := git{bin: "git"}.env(true, "/nonexistent-home")
	joined := strings.Join(env, "\n")
	for _, secret := range []string{"worker-secret", "agent-secret", "cloud-secret", "GIT_DIR="} {
		if strings.Contains(joined, secret) {
			t.Errorf("git's environment holds %q:\n%s", secret, joined)
		}
	}
	for _, kept := range []string{"HTTPS_PROXY=http://proxy.example:3128", "no_proxy=localhost", "SSL_CERT_FILE=/etc/ssl/ca.pem",
		"GIT_SSL_CAINFO=/etc/ssl/git-ca.pem", "LANG=C.UTF-8", "HOME=/nonexistent-home"} {
		if !slices.Contains(env, kept) {
			t.Errorf("git's environment lacks %s:\n%s", kept, joined)
		}
	}
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		t.Errorf("git's environment has no PATH:\n%s", joined)
	}
}
