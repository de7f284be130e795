package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Paths inside the box.
const (
	boxHome  = "/home/agent"
	boxInit  = "/run/whilly/init"
	boxProxy = "/run/whilly/proxy.sock"
)

// systemDirs are bound read-only into every box (symlinks, as on merged-/usr systems,
// are recreated as symlinks); whatever of /etc other users may not read is hidden.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/etc"}

// Config configures a Sandbox.
type Config struct {
	Settings
	// Bwrap is the bubblewrap executable; "" finds bwrap on PATH.
	Bwrap string
	// Init is the executable run as the box's init (it must call HandleInit first thing
	// in main); "" is this process's own executable.
	Init string
}

// Sandbox makes boxes for agent processes. A nil *Sandbox runs them unboxed, with the
// allow-listed environment, and without the opt-out's warning: for agents that start no
// process (sim) and for tests that do not test the box.
type Sandbox struct {
	mode, net     string
	allow         []string // WHILLY_SANDBOX_ALLOW_HOSTS, and the registries' hosts when they are on
	registries    bool     // WHILLY_SANDBOX_REGISTRIES=auto
	registryEnv   []string // the worker's registry settings, for the box's clients
	agentEnv      []string
	bwrap, init   string
	disableUserns bool     // bwrap knows --disable-userns (0.8 and later)
	etcMasks      []string // entries of /etc that other users may not read
}

// New returns a Sandbox for cfg. For ModeBwrap it finds bubblewrap and the init, but
// does not try them: Probe does.
func New(cfg Config) (*Sandbox, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Sandbox{mode: cfg.Mode, net: cfg.Net, allow: cfg.AllowHosts, agentEnv: cfg.AgentEnv,
		registries: cfg.Registries == RegistriesAuto, registryEnv: cfg.Registry.Env}
	if s.registries {
		// The ecosystems' defaults also when the settings were not derived (Settings{}).
		s.allow = slices.Concat(defaultRegistries, cfg.Registry.Hosts, s.allow)
	}
	if s.mode == "" {
		s.mode = ModeBwrap
	}
	if s.mode == ModeNone {
		return s, nil
	}
	bin := cmpOr(cfg.Bwrap, "bwrap")
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not installed (%w)", ErrUnavailable, bin, err)
	}
	s.bwrap = path
	if s.init = cfg.Init; s.init == "" {
		if s.init, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("%w: find this program to run as the box's init: %w", ErrUnavailable, err)
		}
	}
	help, _ := exec.Command(path, "--help").CombinedOutput() //nolint:noctx // a local binary's usage, at once
	s.disableUserns = bytes.Contains(help, []byte("--disable-userns"))
	s.etcMasks = unreadable("/etc")
	removeStaleBoxes(os.TempDir())
	return s, nil
}

// Mode is ModeBwrap or ModeNone (also for a nil Sandbox).
func (s *Sandbox) Mode() string {
	if s == nil {
		return ModeNone
	}
	return s.mode
}

// Net is the box's network policy; "" without a box.
func (s *Sandbox) Net() string {
	if s.Mode() != ModeBwrap {
		return ""
	}
	return s.net
}

// Boxed reports whether agent processes run in a box.
func (s *Sandbox) Boxed() bool { return s.Mode() == ModeBwrap }

// Registries reports whether the box may reach the package registries
// (WHILLY_SANDBOX_REGISTRIES=auto).
func (s *Sandbox) Registries() bool { return s != nil && s.registries }

// AllowedHosts are the hosts the proxy lets a box for agentKind reach, as
// WHILLY_SANDBOX_ALLOW_HOSTS writes them: its model API's (the one a base URL in the
// worker's environment, getenv, names), the package registries' unless they are off,
// and the operator's. Nil unless the box's network is NetProxy.
func (s *Sandbox) AllowedHosts(agentKind string, getenv func(string) string) []string {
	if s.Net() != NetProxy {
		return nil
	}
	var out []string
	for _, r := range allowRules(agentKind, getenv, s.allow) {
		out = append(out, r.String())
	}
	return out
}

// WorkerProxies names the worker's own HTTP proxies (HTTPS_PROXY, HTTP_PROXY) that the
// box's proxy chains through, without their credentials; "" when there are none.
func WorkerProxies(getenv func(string) string) string {
	u, err := upstreamFromEnv(getenv)
	if err != nil {
		return ""
	}
	return u.String()
}

// Denial is a connection the proxy refused.
type Denial struct {
	Host   string `json:"host"` // a valid host name or IP address, else a short description of what was asked
	Port   int    `json:"port"`
	Reason string `json:"reason,omitempty"` // ReasonHost (""), ReasonSNI or ReasonNotTLS
}

// Spec is one process to run in a box.
type Spec struct {
	Path  string   // the executable, resolved on the worker's PATH
	Args  []string // its arguments
	Dir   string   // the workspace, bound read-write; "" is the current directory
	Agent string   // AgentClaude, AgentCodex, AgentCommand or AgentNone (verification)
	// Environ is the worker's environment, which the allow-list takes from; nil is
	// os.Environ().
	Environ []string
	// Env is whilly's own context for the run (WHILLY_TASK_ID …): passed as is.
	Env []string
	// OnDenied, when set, is told about each host the proxy refused (once per host and
	// port, at most maxDenials times). It is called from the proxy's goroutines.
	OnDenied func(Denial)
	// Binds are more of the worker's paths in the box, bound after the workspace (so a
	// bind may cover part of it). Unboxed runs ignore them.
	Binds []Bind
}

// Bind is one of the worker's paths in a box.
type Bind struct {
	Src      string // the worker's path; it must exist
	Dst      string // where the box sees it; "" is Src
	ReadOnly bool
}

func (b Bind) args() []string {
	dst := cmpOr(b.Dst, b.Src)
	if b.ReadOnly {
		return []string{"--ro-bind", b.Src, dst}
	}
	return []string{"--bind", b.Src, dst}
}

// Cmd is a prepared run: start Path with Args in Dir with Env, then Close it.
type Cmd struct {
	Path string
	Args []string
	Dir  string
	Env  []string
	Mode string // ModeBwrap or ModeNone
	Net  string // the box's network policy; "" unboxed

	tmp     string
	home    string // the worker's HOME, where refreshed credentials go back
	proxy   *proxy
	profile []agentProfile
}

// Prepare makes the box for one run. Close the Cmd when the process has ended.
func (s *Sandbox) Prepare(ctx context.Context, spec Spec) (*Cmd, error) {
	environ := spec.Environ
	if environ == nil {
		environ = os.Environ()
	}
	getenv := lookup(environ)
	if !s.Boxed() {
		var agentEnv []string
		if s != nil {
			agentEnv = s.agentEnv
		}
		return &Cmd{Path: spec.Path, Args: spec.Args, Dir: spec.Dir, Mode: ModeNone,
			Env: allowedEnv(environ, spec.Agent, agentEnv, true, getenv("HOME"), nil, spec.Env)}, nil
	}
	dir := spec.Dir
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("sandbox: find the current directory: %w", err)
		}
		dir = wd
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: workspace: %w", err)
	}
	home := getenv("HOME")
	if dir == "/" || (home != "" && within(home, dir)) {
		return nil, fmt.Errorf("sandbox: the workspace %s would expose %s to the agent; run it in a project directory", dir, cmpOr(home, "/"))
	}
	exe, exeBind, err := executable(spec.Path, home)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", boxDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("sandbox: make the box's directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("sandbox: mark the box's directory: %w", err)
	}
	c := &Cmd{Dir: dir, Mode: ModeBwrap, Net: s.net, tmp: tmp, home: home, profile: profileOf(spec.Agent)}
	boxHomeDir := filepath.Join(tmp, "home")
	if err := os.Mkdir(boxHomeDir, 0o700); err != nil {
		c.Close()
		return nil, fmt.Errorf("sandbox: make the box's home: %w", err)
	}
	seedHome(home, boxHomeDir, c.profile)

	a := s.baseArgs()
	var ro []string
	if exeBind != "" {
		ro = append(ro, exeBind)
	}
	ro = append(ro, pathDirs(getenv("PATH"), home)...)
	for _, p := range sortedByDepth(ro) {
		a = append(a, "--ro-bind-try", p, p)
	}
	a = append(a, "--bind", boxHomeDir, boxHome, "--bind", dir, dir)
	for _, b := range spec.Binds {
		a = append(a, b.args()...)
	}
	a = append(a, "--chdir", dir)
	initArgs := []string{boxInit, initArg}
	if s.net == NetProxy {
		up, err := upstreamFromEnv(getenv)
		if err != nil {
			c.Close()
			return nil, err
		}
		sock := filepath.Join(tmp, "proxy.sock")
		c.proxy, err = startProxy(ctx, sock, proxyConfig{rules: allowRules(spec.Agent, getenv, s.allow), upstream: up, onDenied: spec.OnDenied})
		if err != nil {
			c.Close()
			return nil, err
		}
		a = append(a, "--bind", sock, boxProxy)
		initArgs = append(initArgs, "--proxy", boxProxy)
	}
	set := append([]string{"TMPDIR=/tmp", "IS_SANDBOX=1"}, s.registryEnv...)
	if s.net != NetHost && getenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC") == "" {
		// Telemetry and update checks would only be refused by the proxy, one event each.
		set = append(set, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
	}
	c.Env = allowedEnv(environ, spec.Agent, s.agentEnv, s.net == NetHost, boxHome, set, spec.Env)
	a = append(a, "--")
	a = append(a, initArgs...)
	a = append(a, "--", exe)
	c.Path, c.Args = s.bwrap, append(a, spec.Args...)
	return c, nil
}

// baseArgs are the namespaces and the file system every box has, up to the agent's own
// binds.
func (s *Sandbox) baseArgs() []string {
	a := []string{"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"}
	if s.net != NetHost {
		a = append(a, "--unshare-net")
	}
	if s.disableUserns {
		a = append(a, "--disable-userns")
	}
	a = append(a, "--die-with-parent", "--new-session", "--hostname", "whilly-sandbox")
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", target, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	for _, m := range s.etcMasks {
		if fi, err := os.Stat(m); err == nil && fi.IsDir() {
			a = append(a, "--tmpfs", m)
		} else {
			a = append(a, "--ro-bind", os.DevNull, m)
		}
	}
	if s.net == NetHost {
		a = append(a, "--ro-bind-try", "/run/systemd/resolve", "/run/systemd/resolve")
	}
	return append(a, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--ro-bind", s.init, boxInit)
}

// Close stops the run's proxy, keeps credentials the agent's CLI refreshed, and removes
// the box's directory. Call it once the process has ended.
func (c *Cmd) Close() {
	if c == nil || c.tmp == "" {
		return
	}
	if c.proxy != nil {
		c.proxy.close()
	}
	keepCredentials(filepath.Join(c.tmp, "home"), c.home, c.profile)
	if err := os.RemoveAll(c.tmp); err != nil {
		// The agent may have left directories without write permission. Through os.Root,
		// so that a link it planted cannot point the chmod outside the box's directory.
		if root, err := os.OpenRoot(c.tmp); err == nil {
			_ = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, _ error) error {
				if d != nil && d.IsDir() {
					_ = root.Chmod(p, 0o700)
				}
				return nil
			})
			_ = root.Close()
		}
		_ = os.RemoveAll(c.tmp)
	}
	c.tmp = ""
}

// Probe runs a box that does nothing but answer, and says why when it cannot.
func (s *Sandbox) Probe(ctx context.Context) error {
	if !s.Boxed() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	args := append(s.baseArgs(), "--", boxInit, initArg, probeArg)
	cmd := exec.CommandContext(ctx, s.bwrap, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err == nil && strings.TrimSpace(out.String()) == probeAnswer {
		return nil
	}
	msg := strings.TrimSpace(errb.String())
	if msg == "" {
		msg = strings.TrimSpace(out.String())
	}
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if err == nil {
		return fmt.Errorf("%w: %s does not answer as the box's init (its main must call sandbox.HandleInit): %q", ErrUnavailable, s.init, msg)
	}
	return fmt.Errorf("%w: %s: %w: %s", ErrUnavailable, s.bwrap, err, msg)
}

// Check reports whether bubblewrap makes boxes on this machine, as every agent run
// needs them (whilly doctor, worker start-up). The error says how to fix it.
func Check(ctx context.Context) error {
	s, err := New(Config{Settings: Settings{Mode: ModeBwrap}})
	if err == nil {
		err = s.Probe(ctx)
	}
	if err != nil {
		return fmt.Errorf("%w; %s", err, Fix)
	}
	return nil
}

// Fix is what to do when the box does not work.
const Fix = "install bubblewrap (apt-get install bubblewrap; where AppArmor restricts user namespaces, as on Ubuntu 24.04, " +
	"also sysctl -w kernel.apparmor_restrict_unprivileged_userns=0), or set WHILLY_SANDBOX=none to run agents unboxed"

// Open returns the Sandbox the operator's settings ask for. With WHILLY_SANDBOX unset
// the box is used where it works; where it does not, Open fails when needBox (the agent
// runs processes) and returns nil otherwise. WHILLY_SANDBOX=bwrap must work;
// WHILLY_SANDBOX=none is returned as asked (the caller warns).
func Open(ctx context.Context, set Settings, needBox bool) (*Sandbox, error) {
	if err := set.validate(); err != nil {
		return nil, err
	}
	s, err := New(Config{Settings: set})
	if err == nil {
		err = s.Probe(ctx)
	}
	switch {
	case err == nil:
		return s, nil
	case set.Mode == ModeBwrap:
		return nil, fmt.Errorf("WHILLY_SANDBOX=bwrap, but %w; %s", err, Fix)
	case needBox:
		return nil, fmt.Errorf("agents run in a sandbox by default, but %w; %s", err, Fix)
	}
	return nil, nil
}

// executable is the path to run inside the box and what to bind for it: nothing when it
// lives in a system directory; the node_modules directory it lives in, for a CLI that npm
// installed (its native binary sits in a sibling platform package: Codex, Claude Code);
// else the directory it really lives in, or the file alone when that directory would
// expose home.
func executable(path, home string) (exe, bind string, err error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", "", fmt.Errorf("sandbox: resolve the agent's executable %s: %w", path, err)
	}
	if real, err = filepath.Abs(real); err != nil {
		return "", "", fmt.Errorf("sandbox: resolve the agent's executable %s: %w", path, err)
	}
	if underSystem(path) && underSystem(real) {
		return path, "", nil
	}
	d := filepath.Dir(real)
	if i := strings.LastIndex(real, "/node_modules/"); i > 0 {
		d = real[:i+len("/node_modules")]
	}
	if d == "/" || (home != "" && within(home, d)) || underSystem(d) {
		return real, real, nil
	}
	return real, d, nil
}

// pathDirs are the directories of PATH outside the system ones (a Go or Node toolchain
// in /usr/local or under HOME): bound read-only so the agent's shell finds them. A
// directory that is HOME or holds it is never bound.
func pathDirs(path, home string) []string {
	var out []string
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) {
			continue
		}
		d = filepath.Clean(d)
		if d == "/" || underSystem(d) || (home != "" && within(home, d)) || slices.Contains(out, d) {
			continue
		}
		if strings.HasPrefix(d, "/proc") || strings.HasPrefix(d, "/sys") || strings.HasPrefix(d, "/dev") {
			continue
		}
		out = append(out, d)
	}
	return out
}

func underSystem(p string) bool {
	for _, d := range systemDirs {
		if d != "/etc" && (p == d || strings.HasPrefix(p, d+"/")) {
			return true
		}
	}
	return false
}

// within reports whether inner is dir or inside it.
func within(inner, dir string) bool {
	rel, err := filepath.Rel(dir, inner)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func sortedByDepth(paths []string) []string {
	out := slices.Clone(paths)
	slices.SortStableFunc(out, func(a, b string) int {
		return strings.Count(a, "/") - strings.Count(b, "/")
	})
	return out
}

// unreadable lists what under root other users may not read: a worker running as root
// must not show its agent more than an unprivileged user sees (/etc/shadow, TLS keys).
func unreadable(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		need := fs.FileMode(0o004)
		if d.IsDir() {
			need = 0o005
		}
		if fi.Mode().Perm()&need != need {
			out = append(out, p)
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	return out
}

// A box's directory, and the file in it naming the worker that made it.
const (
	boxDirPrefix = "whilly-box-"
	ownerFile    = "owner.pid"
)

// removeStaleBoxes removes the directories of boxes whose worker died without closing
// them (SIGKILL): they hold copies of the agent's credentials. A box of a live process
// stays.
func removeStaleBoxes(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), boxDirPrefix) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := readRegular(filepath.Join(p, ownerFile), false)
		if err != nil {
			continue // not ours to judge (yet)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		c := &Cmd{tmp: p}
		c.Close()
	}
}

// maxConfigFile bounds what is copied into and out of a box's HOME.
const maxConfigFile = 4 << 20

// seedHome copies the agent's own configuration (and nothing else of the worker's HOME)
// into the box's.
func seedHome(from, to string, profiles []agentProfile) {
	if from == "" {
		return
	}
	for _, p := range profiles {
		for _, rel := range p.homeFiles {
			b, err := readRegular(filepath.Join(from, rel), true)
			if err != nil {
				continue
			}
			dst := filepath.Join(to, rel)
			if os.MkdirAll(filepath.Dir(dst), 0o700) == nil {
				_ = os.WriteFile(dst, b, 0o600)
			}
		}
	}
}

// credentialFiles are what an agent's CLI rewrites when it refreshes its login: kept
// after the run so that the worker's next run does not present a spent refresh token.
var credentialFiles = []string{".claude/.credentials.json", ".codex/auth.json"}

// keepCredentials copies refreshed credentials back to the worker's HOME: a regular file
// (never a link the agent planted), of bounded size, that is a JSON object and differs
// from the worker's.
func keepCredentials(box, home string, profiles []agentProfile) {
	if home == "" {
		return
	}
	for _, p := range profiles {
		for _, rel := range p.homeFiles {
			if !slices.Contains(credentialFiles, rel) {
				continue
			}
			src, dst := filepath.Join(box, rel), filepath.Join(home, rel)
			b, err := readRegular(src, false)
			if err != nil || !json.Valid(b) || len(bytes.TrimSpace(b)) == 0 || bytes.TrimSpace(b)[0] != '{' {
				continue
			}
			old, err := readRegular(dst, false)
			if err != nil || bytes.Equal(old, b) {
				continue // only a login the worker has is refreshed
			}
			tmp := dst + ".whilly-tmp"
			if os.WriteFile(tmp, b, 0o600) == nil {
				if os.Rename(tmp, dst) != nil {
					_ = os.Remove(tmp)
				}
			}
		}
	}
}

// readRegular reads a regular file of at most maxConfigFile. Unless follow (the worker's
// own files), it does not follow a symlink nor block on a FIFO: the box's HOME is the
// agent's.
func readRegular(p string, follow bool) ([]byte, error) {
	flags := os.O_RDONLY | openFlags
	if follow {
		flags = os.O_RDONLY | syscall.O_NONBLOCK
	}
	f, err := os.OpenFile(p, flags, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxConfigFile {
		return nil, errors.New("not a regular file of bounded size")
	}
	return io.ReadAll(io.LimitReader(f, maxConfigFile))
}

func cmpOr(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
