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
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// Config configures a Sandbox.
type Config struct {
	Settings
	// Bwrap is the bubblewrap executable; "" finds bwrap on PATH.
	Bwrap string
	// Init is the executable run as the box's init, and outside it as the shim that
	// starts bubblewrap within the box's limits (it must call HandleInit first thing in
	// main); "" is this process's own executable.
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
	tools         []string // toolchain directories bound read-only (WHILLY_SANDBOX_TOOLS)
	agentHome     string   // where the box's HOME is seeded from; "" is the worker's HOME
	bwrap, init   string
	disableUserns bool     // bwrap knows --disable-userns (0.8 and later)
	etcMasks      []string // entries of /etc that other users may not read
	limits        Settings // Memory, Pids, Disk
	cgroups       cgroupParent
	seccomp       []byte // the filter; nil where there is none
}

// New returns a Sandbox for cfg. For ModeBwrap it finds bubblewrap and the init, but
// does not try them: Probe does.
func New(cfg Config) (*Sandbox, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Sandbox{mode: cfg.Mode, net: cfg.Net, allow: cfg.AllowHosts, agentEnv: cfg.AgentEnv,
		tools: cfg.Tools, agentHome: cfg.AgentHome, limits: cfg.Settings,
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
	s.disableUserns = bwrapKnows(path, "--disable-userns")
	s.etcMasks = unreadable("/etc")
	s.cgroups = findCgroupParent()
	s.seccomp = seccompFilter()
	removeStaleBoxes(os.TempDir())
	s.cgroups.removeStale(os.TempDir())
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
	_, baseURLs := customProviders(agentKind, s.files(getenv))
	var out []string
	for _, r := range allowRules(agentKind, getenv, s.allow, baseURLs) {
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

// Cmd is a prepared run: start Path with Args in Dir with Env and ExtraFiles, tell it
// Started, and when it has ended ask it what limit it Exceeded, then Close it.
type Cmd struct {
	Path string
	Args []string
	Dir  string
	Env  []string
	// ExtraFiles are the process's files from descriptor 3 on (exec.Cmd.ExtraFiles).
	ExtraFiles []*os.File
	Mode       string // ModeBwrap or ModeNone
	Net        string // the box's network policy; "" unboxed
	limitsState

	tmp   string
	proxy *proxy
}

// ErrExposesHome is the error of a workspace the box may not give the agent: / or a
// directory that holds HOME, which would show it every file of the user. WorkDir's
// errors are an *ExposesHomeError, which is ErrExposesHome.
var ErrExposesHome = errors.New("the workspace would expose HOME")

// ExposesHomeError names the workspace refused and what it would expose (HOME, or /).
type ExposesHomeError struct{ Dir, Home string }

func (e *ExposesHomeError) Error() string {
	return fmt.Sprintf("the agent would work in %s, which would expose all of %s to it", e.Dir, e.Home)
}

// Is makes the error ErrExposesHome.
func (e *ExposesHomeError) Is(target error) bool { return target == ErrExposesHome }

// WorkDir returns dir ("" the current directory) as an absolute path, or an error
// (ErrExposesHome) when the box may not make it the agent's workspace: it is / or holds
// home. A Sandbox that does not box refuses none. Prepare checks every run with it;
// callers check their work directory once with it before taking work.
func (s *Sandbox) WorkDir(dir, home string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("find the current directory: %w", err)
		}
		dir = wd
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("workspace: %w", err)
	}
	if s.Boxed() && (dir == "/" || (home != "" && within(home, dir))) {
		return dir, &ExposesHomeError{Dir: dir, Home: cmpOr(home, "/")}
	}
	return dir, nil
}

// Prepare makes the box for one run. Close the Cmd when the process has ended.
func (s *Sandbox) Prepare(ctx context.Context, spec Spec) (*Cmd, error) {
	environ := spec.Environ
	if environ == nil {
		environ = os.Environ()
	}
	getenv := lookup(environ)
	files := s.files(getenv)
	envKeys, baseURLs := customProviders(spec.Agent, files)
	var agentEnv []string
	if s != nil {
		agentEnv = s.agentEnv
	}
	agentEnv = append(slices.Clip(agentEnv), envKeys...)
	if !s.Boxed() {
		return &Cmd{Path: spec.Path, Args: spec.Args, Dir: spec.Dir, Mode: ModeNone,
			Env: allowedEnv(environ, spec.Agent, agentEnv, true, getenv("HOME"), nil, spec.Env)}, nil
	}
	home := getenv("HOME")
	dir, err := s.WorkDir(spec.Dir, home)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w; run it in a project directory", err)
	}
	if err := checkTools(s.tools, home); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	exe, exeBinds, err := executable(spec.Path)
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
	c := &Cmd{Dir: dir, Mode: ModeBwrap, Net: s.net, tmp: tmp}
	c.limits = s.limits
	boxHomeDir, boxTmpDir := filepath.Join(tmp, "home"), filepath.Join(tmp, "tmp")
	for _, d := range []string{boxHomeDir, boxTmpDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			c.Close()
			return nil, fmt.Errorf("sandbox: make the box's %s: %w", filepath.Base(d), err)
		}
	}
	creds := seedHome(files, boxHomeDir, profileOf(spec.Agent))
	if s.cgroups.ok() {
		if c.cg, err = s.cgroups.create(filepath.Base(tmp), s.limits.Memory, s.limits.Pids); err != nil {
			c.Close()
			return nil, fmt.Errorf("sandbox: %w", err)
		}
	}
	if c.ExtraFiles, err = s.seccompFiles(); err != nil {
		c.Close()
		return nil, err
	}

	a := append(s.baseArgs(), seccompArgs(c.ExtraFiles)...)
	if os.Getuid() == 0 {
		a = append(a, userEntries(tmp, "/etc")...)
	}
	a = append(a, "--bind", boxTmpDir, "/tmp")
	ro := append(exeBinds, pathDirs(getenv("PATH"), home)...)
	ro = append(ro, s.tools...)
	for _, p := range sortedByDepth(ro) {
		a = append(a, "--ro-bind-try", p, p)
	}
	a = append(a, "--bind", boxHomeDir, boxHome)
	for _, rel := range creds {
		a = append(a, "--ro-bind", filepath.Join(boxHomeDir, rel), filepath.Join(boxHome, rel))
	}
	a = append(a, "--bind", dir, dir)
	for _, b := range spec.Binds {
		a = append(a, b.args()...)
		if !b.ReadOnly {
			c.rwBinds = append(c.rwBinds, b.Src)
		}
	}
	c.rwBase = diskUsage(c.rwBinds...)
	a = append(a, "--chdir", dir)
	initArgs := []string{boxInit, initArg}
	if s.net == NetProxy {
		up, err := upstreamFromEnv(getenv)
		if err != nil {
			c.Close()
			return nil, err
		}
		sock := filepath.Join(tmp, "proxy.sock")
		c.proxy, err = startProxy(ctx, sock, proxyConfig{rules: allowRules(spec.Agent, getenv, s.allow, baseURLs), upstream: up, onDenied: spec.OnDenied})
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
	c.Env = allowedEnv(environ, spec.Agent, agentEnv, s.net == NetHost, boxHome, set, spec.Env)
	a = append(a, "--")
	a = append(a, initArgs...)
	a = append(a, "--", exe)
	c.Path = s.init
	c.Args = append(append(append(c.limitArgs(), "--", s.bwrap), a...), spec.Args...)
	return c, nil
}

// seccompFiles are the box's filter, readable at descriptor 3 (none where there is no
// filter).
func (s *Sandbox) seccompFiles() ([]*os.File, error) {
	if s.seccomp == nil {
		return nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: pass the seccomp filter: %w", err)
	}
	_, err = w.Write(s.seccomp) // far less than a pipe holds
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("sandbox: pass the seccomp filter: %w", err)
	}
	return []*os.File{r}, nil
}

// seccompArgs tell bubblewrap where the filter is: the first of the files.
func seccompArgs(files []*os.File) []string {
	if len(files) == 0 {
		return nil
	}
	return []string{"--seccomp", "3"}
}

// boxUID and boxGID are the box's identity when the worker is root: an ordinary user's,
// without capabilities. Files it writes are the worker's outside.
const boxUID, boxGID = 1000, 1000

// userEntries gives the box's user (boxUID, a root worker's box) a name where etc's
// passwd or group has no entry for it (whoami, Go's os/user and others fail without
// one): a copy with the entry added, made in dir and bound over the box's /etc file.
func userEntries(dir, etc string) []string {
	var a []string
	for _, f := range []struct{ name, id, entry string }{
		{"passwd", strconv.Itoa(boxUID), fmt.Sprintf("agent:x:%d:%d::%s:/bin/sh\n", boxUID, boxGID, boxHome)},
		{"group", strconv.Itoa(boxGID), fmt.Sprintf("agent:x:%d:\n", boxGID)},
	} {
		b, err := os.ReadFile(filepath.Join(etc, f.name))
		if err != nil || hasID(b, f.id) {
			continue
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n')
		}
		p := filepath.Join(dir, f.name)
		if os.WriteFile(p, append(b, f.entry...), 0o644) == nil {
			a = append(a, "--ro-bind", p, "/etc/"+f.name)
		}
	}
	return a
}

// hasID reports whether a passwd or group file has an entry with id in its third field.
func hasID(b []byte, id string) bool {
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, ":"); len(f) > 2 && f[2] == id {
			return true
		}
	}
	return false
}

// baseArgs are the namespaces, the identity and the file system every box has, up to the
// agent's own binds.
func (s *Sandbox) baseArgs() []string {
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = boxUID, boxGID
	}
	a := []string{"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--uid", strconv.Itoa(uid), "--gid", strconv.Itoa(gid), "--cap-drop", "ALL"}
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
	return append(a, "--proc", "/proc", "--dev", "/dev", "--ro-bind", s.init, boxInit)
}

// Close stops the run's proxy and removes the box's directory: nothing the box wrote
// flows back to the worker. Call it once the process has ended.
func (c *Cmd) Close() {
	if c == nil || c.tmp == "" {
		return
	}
	c.stopWatch()
	c.cg.remove()
	closeFiles(c.ExtraFiles)
	c.ExtraFiles = nil
	if c.proxy != nil {
		c.proxy.close()
	}
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
	files, err := s.seccompFiles()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer closeFiles(files)
	args := append(append(s.baseArgs(), seccompArgs(files)...), "--", boxInit, initArg, probeArg)
	cmd := exec.CommandContext(ctx, s.bwrap, args...)
	cmd.Env, cmd.ExtraFiles = []string{"PATH=/usr/bin:/bin"}, files
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
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
		return fmt.Errorf("%w; %s", err, Fix(err))
	}
	return nil
}

// Fix says what to do when the box does not work, from what failed: bubblewrap
// missing, a /proc it cannot mount again, or user namespaces refused.
func Fix(err error) string {
	const unboxed = ", or set WHILLY_SANDBOX=none to run agents unboxed"
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		return "install bubblewrap (apt-get install bubblewrap)" + unboxed
	case strings.Contains(msg, "mount proc"):
		// The kernel lets a user namespace mount a fresh /proc only where no part of
		// the current one is covered by another mount.
		return "bubblewrap cannot mount a fresh /proc because parts of this process's /proc are covered: " +
			"under systemd, turn off ProtectKernelTunables=, ProtectKernelLogs=, ProtectProc= and ProcSubset= " +
			"(as deploy/systemd/whilly-worker@.service does); in Docker, add security_opt systempaths=unconfined; " +
			"in Kubernetes, set procMount: Unmasked with hostUsers: false" + unboxed
	case strings.Contains(msg, "namespace") || strings.Contains(msg, "uid map") || strings.Contains(msg, "uid_map"):
		return "allow this user to create user namespaces (where AppArmor restricts them, as on Ubuntu 24.04: " +
			"sysctl -w kernel.apparmor_restrict_unprivileged_userns=0; under systemd: no RestrictNamespaces= and no " +
			"SystemCallFilter=; in a container: seccomp and AppArmor unconfined)" + unboxed
	}
	return "check that bubblewrap (apt-get install bubblewrap) can create user, pid and network namespaces and mount /proc " +
		"here (where AppArmor restricts user namespaces, as on Ubuntu 24.04: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0)" + unboxed
}

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
		return nil, fmt.Errorf("WHILLY_SANDBOX=bwrap, but %w; %s", err, Fix(err))
	case needBox:
		return nil, fmt.Errorf("agents run in a sandbox by default, but %w; %s", err, Fix(err))
	}
	return nil, nil
}

// executable is the path to run inside the box and what to bind for it: nothing when it
// lives in a system directory; for a CLI that npm installed, its own package and the
// platform packages beside it that hold its native binary (Codex, Claude Code); else
// the file alone. Never the directory it lies in, which may hold anything.
func executable(path string) (exe string, binds []string, err error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", nil, fmt.Errorf("sandbox: resolve the agent's executable %s: %w", path, err)
	}
	if real, err = filepath.Abs(real); err != nil {
		return "", nil, fmt.Errorf("sandbox: resolve the agent's executable %s: %w", path, err)
	}
	if underSystem(path) && underSystem(real) {
		return path, nil, nil
	}
	if pkgs := npmPackages(real); pkgs != nil {
		return real, pkgs, nil
	}
	return real, []string{real}, nil
}

// npmPackages are, for a file of an npm package (…/node_modules/[@scope/]name/…), that
// package's directory and its siblings in the same scope named name-… (the platform
// packages: @openai/codex-linux-x64); nil for a file of no package.
func npmPackages(real string) []string {
	i := strings.LastIndex(real, "/node_modules/")
	if i < 0 {
		return nil
	}
	nm := real[:i+len("/node_modules")]
	parts := strings.Split(real[len(nm)+1:], "/")
	scope := ""
	if strings.HasPrefix(parts[0], "@") {
		scope, parts = parts[0], parts[1:]
	}
	if len(parts) < 2 || strings.HasPrefix(parts[0], ".") {
		return nil
	}
	dir, name := filepath.Join(nm, scope), parts[0]
	out := []string{filepath.Join(dir, name)}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if !strings.HasPrefix(e.Name(), name+"-") {
			continue
		}
		if fi, err := os.Stat(p); err == nil && fi.IsDir() { // pnpm links its packages
			out = append(out, p)
		}
	}
	return out
}

// pathDirs are what the box binds read-only for the worker's PATH (home is its HOME).
func pathDirs(path, home string) []string {
	var out []string
	for _, d := range filepath.SplitList(path) {
		if bind, _ := pathEntry(d, home); bind != "" && !slices.Contains(out, bind) {
			out = append(out, bind)
		}
	}
	return out
}

// pathEntry is what the box makes of one PATH entry: the directory bound for it ("" for
// none), and whether the agent's shell misses it (hidden). Bound: an absolute entry
// outside the system directories and outside HOME (a Go or Node toolchain), or, for a
// toolchain's bin directory (/opt/go/bin), the toolchain's directory, so that what bin
// links to resolves, unless that is a top-level directory (/opt) or holds HOME. Hidden:
// relative entries, and those under HOME or holding it.
func pathEntry(d, home string) (bind string, hidden bool) {
	if !filepath.IsAbs(d) {
		return "", true
	}
	d = filepath.Clean(d)
	switch {
	case underSystem(d):
		return "", false
	case d == "/" || (home != "" && (within(d, home) || within(home, d))):
		return "", true
	case d == "/proc" || d == "/sys" || d == "/dev" || strings.HasPrefix(d, "/proc/") || strings.HasPrefix(d, "/sys/") || strings.HasPrefix(d, "/dev/"):
		return "", true
	}
	if parent := filepath.Dir(d); filepath.Base(d) == "bin" && filepath.Dir(parent) != "/" && !holdsHome(parent, home) {
		return parent, false
	}
	return d, false
}

// HiddenPath lists the entries of the worker's PATH (path) that an agent's box does not
// see: relative ones, and those under HOME (home) that no WHILLY_SANDBOX_TOOLS directory
// (tools) holds.
func HiddenPath(path, home string, tools []string) []string {
	var out []string
	for _, d := range filepath.SplitList(path) {
		if _, hidden := pathEntry(d, home); !hidden || slices.Contains(out, d) {
			continue
		}
		if filepath.IsAbs(d) && slices.ContainsFunc(tools, func(t string) bool { return within(filepath.Clean(d), filepath.Clean(t)) }) {
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

// bwrapKnows reports whether the bubblewrap at path takes the option opt: its usage text
// names it. That text is in the binary, and reading it costs far less than running the
// binary (bwrap --help cost ~3 ms of CPU per worker start, perf stat). A file that does
// not hold opt, such as a wrapper script or a bwrap without the option, is run with --help.
func bwrapKnows(path, opt string) bool {
	if f, err := os.Open(path); err == nil {
		found := holds(io.LimitReader(f, 8<<20), []byte(opt))
		_ = f.Close() // read-only
		if found {
			return true
		}
	}
	help, _ := exec.Command(path, "--help").CombinedOutput() //nolint:noctx // a local binary's usage, at once
	return bytes.Contains(help, []byte(opt))
}

// holds reports whether r holds s. It reads r in pieces into one small buffer, keeping
// the end of each piece that could begin s: reading the whole binary into memory cost 51
// page faults (perf record -e page-faults), ~12 µs of CPU each on a VM.
func holds(r io.Reader, s []byte) bool {
	buf := make([]byte, 0, 16<<10)
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if bytes.Contains(buf, s) {
			return true
		}
		if err != nil {
			return false
		}
		if keep := min(len(s)-1, len(buf)); len(buf) == cap(buf) {
			buf = buf[:copy(buf, buf[len(buf)-keep:])]
		}
	}
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

// maxConfigFile bounds what is copied into a box's HOME.
const maxConfigFile = 4 << 20

// seedHome copies the agents' own configuration (and nothing else of the worker's files)
// from where files places it into the box's HOME (to). The login files lose their
// refresh tokens; seedHome returns those it wrote, for the box to see read-only.
func seedHome(files agentFiles, to string, profiles []agentProfile) (creds []string) {
	for _, p := range profiles {
		for _, rel := range p.homeFiles {
			src := files.path(rel)
			if src == "" {
				continue
			}
			b, err := readRegular(src, true)
			if err != nil {
				continue
			}
			login := slices.Contains(credentialFiles, rel)
			if login {
				if b, err = withoutRefreshTokens(b); err != nil {
					continue // a login file that cannot be cleaned is not copied
				}
			}
			dst := filepath.Join(to, rel)
			if os.MkdirAll(filepath.Dir(dst), 0o700) != nil {
				continue
			}
			mode := fs.FileMode(0o600)
			if login {
				mode = 0o400
			}
			if os.WriteFile(dst, b, mode) == nil && login {
				creds = append(creds, rel)
			}
		}
	}
	return creds
}

// credentialFiles are the agents' CLIs' login files.
var credentialFiles = []string{".claude/.credentials.json", ".codex/auth.json"}

// withoutRefreshTokens is a login file (a JSON object) without its refresh tokens, at
// any depth (refreshToken, refresh_token): the box gets what uses the login, never what
// renews it. Everything else (access and ID tokens, API keys, expiry, scopes) stays.
func withoutRefreshTokens(b []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v map[string]any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("read a login file: %w", err)
	}
	dropRefreshTokens(v)
	var out bytes.Buffer
	e := json.NewEncoder(&out)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, fmt.Errorf("write a login file: %w", err)
	}
	return out.Bytes(), nil
}

func dropRefreshTokens(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if strings.EqualFold(strings.ReplaceAll(k, "_", ""), "refreshtoken") {
				delete(x, k)
				continue
			}
			dropRefreshTokens(e)
		}
	case []any:
		for _, e := range x {
			dropRefreshTokens(e)
		}
	}
}

// files is where the worker keeps the agents' configuration, for a run in getenv's
// environment.
func (s *Sandbox) files(getenv func(string) string) agentFiles {
	f := agentFiles{home: getenv("HOME"), getenv: getenv}
	if s != nil {
		f.agentHome = s.agentHome
	}
	return f
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

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

func cmpOr(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
