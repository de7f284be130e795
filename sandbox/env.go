package sandbox

import (
	"slices"
	"strings"
)

// baseEnv are the worker's variables every agent gets: what a shell and its tools need
// to find programs, speak the locale and trust certificates. Nothing in it is a secret.
var baseEnv = []string{"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "SHELL",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS"}

// proxyEnv are the worker's own proxy settings: passed on when the agent uses the
// worker's network, replaced by the box's proxy otherwise.
var proxyEnv = []string{"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY",
	"https_proxy", "http_proxy", "no_proxy", "all_proxy"}

// allowedEnv builds an agent's environment from the worker's (environ) by allow-list:
// baseEnv and LC_*, the agent's own variables (API keys, base URLs), the names
// the operator listed in WHILLY_AGENT_ENV, with HOME set to home; then set (what the box
// itself needs) and extra (whilly's context for the run: WHILLY_TASK_ID …), which win.
// Whilly's own secrets never pass, whatever the lists say.
func allowedEnv(environ []string, kind string, agentEnv []string, passProxy bool, home string, set, extra []string) []string {
	profiles := profileOf(kind)
	keep := func(name string) bool {
		if Secret(name) || name == "HOME" {
			return false
		}
		if slices.Contains(baseEnv, name) || strings.HasPrefix(name, "LC_") || slices.Contains(agentEnv, name) {
			return true
		}
		if slices.Contains(proxyEnv, name) {
			return passProxy
		}
		for _, p := range profiles {
			for _, pre := range p.envPrefixes {
				if strings.HasPrefix(name, pre) {
					return true
				}
			}
		}
		return false
	}
	out := make([]string, 0, 16+len(set)+len(extra))
	seen := map[string]int{}
	put := func(kv string) {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || Secret(name) {
			return
		}
		if i, dup := seen[name]; dup {
			out[i] = kv
			return
		}
		seen[name] = len(out)
		out = append(out, kv)
	}
	for _, kv := range environ {
		if name, _, ok := strings.Cut(kv, "="); ok && keep(name) {
			put(kv)
		}
	}
	if home != "" {
		put("HOME=" + home)
	}
	for _, kv := range set {
		put(kv)
	}
	for _, kv := range extra {
		put(kv)
	}
	return out
}

func lookup(environ []string) func(string) string {
	return func(name string) string {
		for i := len(environ) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(environ[i], name+"="); ok {
				return v
			}
		}
		return ""
	}
}
