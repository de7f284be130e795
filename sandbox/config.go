package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
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

// Settings are the operator's choices, as read from the environment.
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
	// Tools are more toolchain directories bound read-only into the box (they may lie
	// under HOME, as rustup's or pyenv's do; never HOME itself nor a directory holding it).
	Tools []string
	// AgentHome is the operator's directory the box's HOME is seeded from, read only;
	// "" is the agents' configuration in the worker's HOME.
	AgentHome string
	// Memory (bytes), Pids and Disk (bytes) bound one box; 0 is the default
	// (DefaultMemory, DefaultPids, DefaultDisk).
	Memory int64
	Pids   int
	Disk   int64
	// Registries is RegistriesAuto ("" too): the proxy also lets the agent reach the
	// ecosystems' default package registries and those of Registry.Hosts; or
	// RegistriesOff.
	Registries string
	// Registry is what the worker's own configuration says of package registries
	// (DeriveRegistries); its Env reaches the box whatever Registries says.
	Registry Registries
}

// The default limits of one box.
const (
	DefaultMemory = 4 << 30
	DefaultPids   = 1024
	DefaultDisk   = 10 << 30
)

// SettingsFromEnv reads WHILLY_SANDBOX, WHILLY_SANDBOX_NET, WHILLY_SANDBOX_ALLOW_HOSTS,
// WHILLY_AGENT_ENV, WHILLY_SANDBOX_REGISTRIES, WHILLY_SANDBOX_TOOLS, WHILLY_AGENT_HOME and
// the limits WHILLY_SANDBOX_MEMORY, WHILLY_SANDBOX_PIDS and WHILLY_SANDBOX_DISK through
// getenv (usually os.Getenv), and checks them (the tools against the worker's HOME); it
// derives the package registries the worker is configured for, and checks the worker's
// own proxy settings, which the box's proxy chains through.
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	env := config.New(getenv)
	s := Settings{
		Mode:       strings.ToLower(env.Raw(config.Sandbox)),
		Net:        strings.ToLower(env.Raw(config.SandboxNet)),
		AllowHosts: env.List(config.SandboxAllowHosts),
		AgentEnv:   env.List(config.AgentEnv),
		Tools:      env.List(config.SandboxTools),
		AgentHome:  env.Raw(config.AgentHome),
		Registries: strings.ToLower(env.Raw(config.SandboxRegistries)),
		Registry:   DeriveRegistries(getenv),
	}
	var err error
	if s.Memory, err = env.Size(config.SandboxMemory); err != nil {
		return s, err
	}
	if s.Pids, err = env.Int(config.SandboxPids); err != nil {
		return s, err
	}
	if s.Disk, err = env.Size(config.SandboxDisk); err != nil {
		return s, err
	}
	if err := s.validate(); err != nil {
		return s, err
	}
	if s.Net == NetProxy {
		if _, err := upstreamFromEnv(getenv); err != nil {
			return s, err
		}
	}
	return s, checkTools(s.Tools, getenv("HOME"))
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
	if s.Memory < 0 || s.Pids < 0 || s.Disk < 0 {
		return errors.New("the sandbox's limits must not be negative")
	}
	s.Memory = cmp.Or(s.Memory, DefaultMemory)
	s.Pids = cmp.Or(s.Pids, DefaultPids)
	s.Disk = cmp.Or(s.Disk, DefaultDisk)
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
	if s.AgentHome != "" && !filepath.IsAbs(s.AgentHome) {
		return fmt.Errorf("WHILLY_AGENT_HOME is %q: it must be an absolute path", s.AgentHome)
	}
	return checkTools(s.Tools, "")
}

// checkTools refuses a toolchain directory that is not an absolute path, or that is the
// worker's HOME (home; "" checks only "/") or holds it: the box never sees HOME whole.
func checkTools(tools []string, home string) error {
	for _, d := range tools {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("WHILLY_SANDBOX_TOOLS: %q is not an absolute path", d)
		}
		if holdsHome(d, home) {
			return fmt.Errorf("WHILLY_SANDBOX_TOOLS names %s, which is or holds the worker's HOME (%s): "+
				"name the toolchain's own directory, such as %s", d, cmpOr(home, "/"), filepath.Join(cmpOr(home, "/root"), ".rustup"))
		}
	}
	return nil
}

// holdsHome reports whether dir is "/", or home or a directory holding it, also once
// their links are resolved.
func holdsHome(dir, home string) bool {
	dir = filepath.Clean(dir)
	if dir == "/" {
		return true
	}
	if home == "" {
		return false
	}
	if within(home, dir) {
		return true
	}
	rd, err1 := filepath.EvalSymlinks(dir)
	rh, err2 := filepath.EvalSymlinks(home)
	return err1 == nil && err2 == nil && (rd == "/" || within(rh, rd))
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
	homeFiles   []string // files under HOME copied into the box's HOME
	configDir   string   // the CLI's directory in HOME
	dirVar      string   // the CLI's variable that moves configDir elsewhere
	baseURLVars []string // variables that override the model API's URL
	hosts       []string // the model API's default hosts
}

var (
	claudeProfile = agentProfile{
		envPrefixes: []string{"ANTHROPIC_", "CLAUDE_CODE_"},
		homeFiles:   []string{".claude.json", ".claude/.credentials.json", ".claude/settings.json", ".claude/CLAUDE.md"},
		configDir:   ".claude",
		dirVar:      "CLAUDE_CONFIG_DIR",
		baseURLVars: []string{"ANTHROPIC_BASE_URL"},
		hosts:       []string{"api.anthropic.com"},
	}
	codexProfile = agentProfile{
		envPrefixes: []string{"OPENAI_", "CODEX_API_KEY"},
		homeFiles:   []string{".codex/auth.json", ".codex/config.toml", ".codex/AGENTS.md"},
		configDir:   ".codex",
		dirVar:      "CODEX_HOME",
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
// base URL names, when the worker's environment overrides it), the hosts of baseURLs
// (the custom model providers of the agent's configuration) and the operator's hosts.
func allowRules(kind string, getenv func(string) string, extra, baseURLs []string) []hostRule {
	var rules []hostRule
	add := func(s string) {
		if r, err := parseHostRule(s); err == nil && !slices.Contains(rules, r) {
			rules = append(rules, r)
		}
	}
	addURL := func(raw string) bool {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Hostname() == "" {
			return false
		}
		if u.Port() != "" {
			add(net.JoinHostPort(u.Hostname(), u.Port()))
		} else {
			add(u.Hostname())
		}
		return true
	}
	for _, p := range profileOf(kind) {
		overridden := false
		for _, v := range p.baseURLVars {
			if addURL(getenv(v)) {
				overridden = true
			}
		}
		if !overridden {
			for _, h := range p.hosts {
				add(h)
			}
		}
	}
	for _, u := range baseURLs {
		addURL(u)
	}
	for _, h := range extra {
		add(h)
	}
	return rules
}

// agentFiles says where the worker keeps the agents' configuration a box's HOME is seeded
// from: the operator's WHILLY_AGENT_HOME (agentHome), else the worker's HOME, where a
// CLI's own variable (CODEX_HOME, CLAUDE_CONFIG_DIR) may move its directory.
type agentFiles struct {
	home, agentHome string
	getenv          func(string) string
}

// path is the worker's file for rel, a path under the box's HOME; "" when there is none.
func (f agentFiles) path(rel string) string {
	if f.agentHome != "" {
		return filepath.Join(f.agentHome, rel)
	}
	for _, p := range []agentProfile{claudeProfile, codexProfile} {
		if rest, ok := strings.CutPrefix(rel, p.configDir+"/"); ok {
			if d := f.getenv(p.dirVar); filepath.IsAbs(d) {
				return filepath.Join(d, rest)
			}
		}
	}
	if f.home == "" {
		return ""
	}
	return filepath.Join(f.home, rel)
}

func filesFromEnv(getenv func(string) string) agentFiles {
	return agentFiles{home: getenv("HOME"), agentHome: config.New(getenv).Raw(config.AgentHome), getenv: getenv}
}

// AgentFile is the worker's file a box's ~/rel is seeded from (rel such as
// ".claude/.credentials.json"), as getenv, the worker's environment, places it:
// under WHILLY_AGENT_HOME, CODEX_HOME, CLAUDE_CONFIG_DIR or HOME. "" when there is none.
func AgentFile(rel string, getenv func(string) string) string {
	return filesFromEnv(getenv).path(rel)
}

// codexProvider is a model provider codex's config.toml selects instead of OpenAI's.
type codexProvider struct {
	name    string
	envKey  string // the variable holding its key; "" when it needs none
	baseURL string
}

// CodexProvider is the custom model provider the worker's codex configuration selects
// (model_provider = "x" with a [model_providers.x] table: env_key, base_url): its name
// and the variable holding its key ("" when it needs none); ok is false when codex uses
// OpenAI's, with its own login.
func CodexProvider(getenv func(string) string) (name, envKey string, ok bool) {
	p, ok := readCodexProvider(filesFromEnv(getenv))
	return p.name, p.envKey, ok
}

func readCodexProvider(files agentFiles) (codexProvider, bool) {
	b, err := readRegular(files.path(".codex/config.toml"), true)
	if err != nil {
		return codexProvider{}, false
	}
	return parseCodexProvider(string(b))
}

// customProviders are what the agent's configuration adds for a custom model provider:
// the variable holding its key, which reaches the box, and its base URL, whose host the
// proxy allows.
func customProviders(kind string, files agentFiles) (envKeys, baseURLs []string) {
	if kind != AgentCodex && kind != AgentCommand {
		return nil, nil
	}
	p, ok := readCodexProvider(files)
	if !ok {
		return nil, nil
	}
	if p.envKey != "" {
		envKeys = append(envKeys, p.envKey)
	}
	if p.baseURL != "" {
		baseURLs = append(baseURLs, p.baseURL)
	}
	return envKeys, baseURLs
}

// parseCodexProvider reads what it needs of codex's config.toml: the top level's
// model_provider (or that of the [profiles.<profile>] it selects) and that provider's
// table. Only string values on one line are read, which is how codex writes them.
func parseCodexProvider(toml string) (codexProvider, bool) {
	tables := map[string]map[string]string{}
	table := ""
	for _, line := range strings.Split(toml, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			head, _, _ := strings.Cut(strings.TrimPrefix(line, "["), "]")
			parts := strings.Split(head, ".")
			for i, p := range parts {
				parts[i] = strings.Trim(strings.TrimSpace(p), `"'`)
			}
			table = strings.Join(parts, ".")
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		key = strings.Trim(strings.TrimSpace(key), `"'`)
		val = strings.TrimSpace(val)
		if len(val) < 2 || (val[0] != '"' && val[0] != '\'') {
			continue
		}
		end := strings.IndexByte(val[1:], val[0])
		if end < 0 {
			continue
		}
		if tables[table] == nil {
			tables[table] = map[string]string{}
		}
		tables[table][key] = val[1 : 1+end]
	}
	name := tables[""]["model_provider"]
	if prof := tables[""]["profile"]; prof != "" && tables["profiles."+prof]["model_provider"] != "" {
		name = tables["profiles."+prof]["model_provider"]
	}
	if name == "" || name == "openai" {
		return codexProvider{}, false
	}
	t := tables["model_providers."+name]
	return codexProvider{name: name, envKey: t["env_key"], baseURL: t["base_url"]}, true
}

// ErrUnavailable means bubblewrap cannot make a box on this machine.
var ErrUnavailable = errors.New("the sandbox (bubblewrap) does not work here")
