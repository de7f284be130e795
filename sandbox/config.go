package sandbox

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/whilly-go/whilly/internal/config"
)

// Modes of WHILLY_SANDBOX.
const (
	ModeBwrap = "bwrap" // every agent process runs under bubblewrap
	ModeNone  = "none"  // the explicit opt-out: agents run as the worker's user, unboxed
)

// Network policies of WHILLY_SANDBOX_NET.
const (
	NetProxy = "proxy" // only loopback; egress through the worker's allow-list proxy
	NetNone  = "none"  // only loopback, no proxy: no egress at all
	NetHost  = "host"  // the worker's own network
)

// Settings are the operator's choices, as read from the environment (SPEC §14).
type Settings struct {
	// Mode is ModeBwrap, ModeNone, or "" (unset): bwrap where it works, else an error
	// for a worker that would run an agent process (Open).
	Mode string
	// Net is NetProxy (default), NetNone or NetHost.
	Net string
	// AllowHosts are hosts the agent may reach through the proxy besides its model API's:
	// "host" (ports 80 and 443), "host:port", or "*.domain" (its subdomains, 80 and 443).
	AllowHosts []string
	// AgentEnv names more variables of the worker's environment that reach the agent.
	AgentEnv []string
	// Registries is RegistriesAuto ("" too): the proxy also lets the agent reach the
	// ecosystems' default package registries and those of Registry.Hosts; or
	// RegistriesOff.
	Registries string
	// Registry is what the worker's own configuration says of package registries
	// (DeriveRegistries); its Env reaches the box whatever Registries says.
	Registry Registries
}

// SettingsFromEnv reads WHILLY_SANDBOX, WHILLY_SANDBOX_NET, WHILLY_SANDBOX_ALLOW_HOSTS,
// WHILLY_AGENT_ENV and WHILLY_SANDBOX_REGISTRIES through getenv (usually os.Getenv), and
// checks them; it derives the package registries the worker is configured for, and
// checks the worker's own proxy settings, which the box's proxy chains through.
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	env := config.New(getenv)
	s := Settings{
		Mode:       strings.ToLower(env.Raw(config.Sandbox)),
		Net:        strings.ToLower(env.Raw(config.SandboxNet)),
		AllowHosts: env.List(config.SandboxAllowHosts),
		AgentEnv:   env.List(config.AgentEnv),
		Registries: strings.ToLower(env.Raw(config.SandboxRegistries)),
		Registry:   DeriveRegistries(getenv),
	}
	if err := s.validate(); err != nil {
		return s, err
	}
	if s.Net == NetProxy {
		if _, err := upstreamFromEnv(getenv); err != nil {
			return s, err
		}
	}
	return s, nil
}

func (s *Settings) validate() error {
	switch s.Mode {
	case "", ModeBwrap, ModeNone:
	default:
		return fmt.Errorf("WHILLY_SANDBOX is %q: it must be bwrap or none", s.Mode)
	}
	switch s.Net {
	case "":
		s.Net = NetProxy
	case NetProxy, NetNone, NetHost:
	default:
		return fmt.Errorf("WHILLY_SANDBOX_NET is %q: it must be proxy, none or host", s.Net)
	}
	switch s.Registries {
	case "":
		s.Registries = RegistriesAuto
	case RegistriesAuto, RegistriesOff:
	default:
		return fmt.Errorf("WHILLY_SANDBOX_REGISTRIES is %q: it must be auto or off", s.Registries)
	}
	for _, h := range s.AllowHosts {
		if _, err := parseHostRule(h); err != nil {
			return fmt.Errorf("WHILLY_SANDBOX_ALLOW_HOSTS: %w", err)
		}
	}
	for _, n := range s.AgentEnv {
		if !envName(n) {
			return fmt.Errorf("WHILLY_AGENT_ENV: %q is not a variable name", n)
		}
		if Secret(n) {
			return fmt.Errorf("WHILLY_AGENT_ENV names %s: whilly's own secrets never reach an agent", n)
		}
	}
	return nil
}

func envName(n string) bool {
	if n == "" || (n[0] >= '0' && n[0] <= '9') {
		return false
	}
	for _, r := range n {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// Secret reports whether a variable holds one of whilly's own secrets (worker and
// bootstrap tokens, the App key, the database URL …), which never reach an agent.
func Secret(name string) bool {
	n := strings.ToUpper(name)
	if !strings.HasPrefix(n, "WHILLY_") {
		return false
	}
	if n == "WHILLY_DATABASE_URL" {
		return true
	}
	for _, s := range []string{"TOKEN", "SECRET", "PRIVATE_KEY", "PASSWORD"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// hostRule is one allowed destination: a host (or, with wildcard, its subdomains) and
// a port, 0 meaning 80 and 443.
type hostRule struct {
	host     string
	wildcard bool
	port     int
}

func parseHostRule(s string) (hostRule, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	r := hostRule{}
	host := s
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return r, fmt.Errorf("%q has a bad port", s)
		}
		host, r.port = h, n
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host, r.wildcard = rest, true
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" || strings.ContainsAny(host, "/@ *") {
		return r, fmt.Errorf("%q is not a host, host:port or *.domain", s)
	}
	r.host = host
	return r, nil
}

// String is the rule as WHILLY_SANDBOX_ALLOW_HOSTS writes it.
func (r hostRule) String() string {
	h := r.host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if r.wildcard {
		h = "*." + h
	}
	if r.port != 0 {
		h += ":" + strconv.Itoa(r.port)
	}
	return h
}

func (r hostRule) allows(host string, port int) bool {
	if r.port == 0 && port != 80 && port != 443 {
		return false
	}
	if r.port != 0 && port != r.port {
		return false
	}
	if r.wildcard {
		return strings.HasSuffix(host, "."+r.host)
	}
	return host == r.host
}

// Kinds of agent a box is made for: they decide which API-key variables, which
// configuration in HOME and which model API host the agent gets.
const (
	AgentClaude  = "claude"
	AgentCodex   = "codex"
	AgentCommand = "command" // any executable: it may wrap either CLI, so it gets both
	AgentNone    = ""        // a verification command: no key, no configuration
)

// agentProfile is what one kind of agent needs from the worker.
type agentProfile struct {
	envPrefixes []string // variables passed whole (API keys, base URLs, models)
	homeFiles   []string // files and directories under HOME copied into the box's HOME
	baseURLVars []string // variables that override the model API's URL
	hosts       []string // the model API's default hosts
}

var (
	claudeProfile = agentProfile{
		envPrefixes: []string{"ANTHROPIC_", "CLAUDE_CODE_"},
		homeFiles:   []string{".claude.json", ".claude/.credentials.json", ".claude/settings.json", ".claude/CLAUDE.md"},
		baseURLVars: []string{"ANTHROPIC_BASE_URL"},
		hosts:       []string{"api.anthropic.com"},
	}
	codexProfile = agentProfile{
		envPrefixes: []string{"OPENAI_", "CODEX_API_KEY"},
		homeFiles:   []string{".codex/auth.json", ".codex/config.toml", ".codex/AGENTS.md"},
		baseURLVars: []string{"OPENAI_BASE_URL"},
		hosts:       []string{"api.openai.com", "chatgpt.com", "auth.openai.com"},
	}
)

func profileOf(kind string) []agentProfile {
	switch kind {
	case AgentClaude:
		return []agentProfile{claudeProfile}
	case AgentCodex:
		return []agentProfile{codexProfile}
	case AgentCommand:
		return []agentProfile{claudeProfile, codexProfile}
	}
	return nil
}

// allowRules is what the proxy lets through for kind: the model API's host (the one its
// base URL names, when the worker's environment overrides it) and the operator's hosts.
func allowRules(kind string, getenv func(string) string, extra []string) []hostRule {
	var rules []hostRule
	add := func(s string) {
		if r, err := parseHostRule(s); err == nil && !slices.Contains(rules, r) {
			rules = append(rules, r)
		}
	}
	for _, p := range profileOf(kind) {
		overridden := false
		for _, v := range p.baseURLVars {
			if u, err := url.Parse(strings.TrimSpace(getenv(v))); err == nil && u.Hostname() != "" {
				overridden = true
				if u.Port() != "" {
					add(net.JoinHostPort(u.Hostname(), u.Port()))
				} else {
					add(u.Hostname())
				}
			}
		}
		if !overridden {
			for _, h := range p.hosts {
				add(h)
			}
		}
	}
	for _, h := range extra {
		add(h)
	}
	return rules
}

// ErrUnavailable means bubblewrap cannot make a box on this machine.
var ErrUnavailable = errors.New("the sandbox (bubblewrap) does not work here")
