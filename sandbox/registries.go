package sandbox

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"io"
	"maps"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Values of WHILLY_SANDBOX_REGISTRIES.
const (
	RegistriesAuto = "auto" // the ecosystems' default registries and those the worker is configured for
	RegistriesOff  = "off"  // none but what WHILLY_SANDBOX_ALLOW_HOSTS names
)

// defaultRegistries are each ecosystem's own registry: Go's module proxy and checksum
// database, npm, PyPI, crates.io, Maven Central.
var defaultRegistries = []string{
	"proxy.golang.org", "sum.golang.org",
	"registry.npmjs.org",
	"pypi.org", "files.pythonhosted.org",
	"crates.io", "index.crates.io", "static.crates.io",
	"repo.maven.apache.org", "repo1.maven.org",
}

// Registries are the package registries the worker's own clients are configured for.
type Registries struct {
	// Hosts are the registries' hosts (host, or host:port), the ecosystems' defaults first.
	Hosts []string
	// Env makes the box's clients use the same registries (GOPROXY, npm_config_registry,
	// PIP_INDEX_URL, CARGO_REGISTRIES_<NAME>_INDEX …): NAME=value, without credentials.
	// Cargo's source replacement and Maven's mirrors live in their configuration files,
	// which the box does not see.
	Env []string
}

// goEnv are Go's settings that decide where modules come from and how they are checked:
// passed into the box from the worker's environment or its go env file.
var goEnv = []string{"GOPROXY", "GOSUMDB", "GONOSUMDB", "GONOSUMCHECK", "GOPRIVATE", "GONOPROXY", "GOFLAGS", "GOINSECURE", "GOTOOLCHAIN"}

// uvEnv are uv's index variables (space-separated URLs; UV_INDEX entries may be name=URL).
var uvEnv = []string{"UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_EXTRA_INDEX_URL", "UV_INDEX"}

// DeriveRegistries reads which package registries the worker uses: its environment
// (getenv, HOME in it) and its clients' configuration files (the go env file, npmrc,
// pip.conf, cargo's config.toml, Maven's settings.xml). It runs no program, and nothing
// of a credential (an auth token, a URL's userinfo) lands in what it returns.
func DeriveRegistries(getenv func(string) string) Registries {
	return deriveRegistries(getenv, "/")
}

// deriveRegistries is DeriveRegistries with the system's configuration files (/etc …)
// under root.
func deriveRegistries(getenv func(string) string, root string) Registries {
	d := &derivation{getenv: getenv, root: root, home: getenv("HOME")}
	for _, h := range defaultRegistries {
		d.addHost(h)
	}
	d.golang()
	d.npm()
	d.pip()
	d.uv()
	d.cargo()
	d.maven()
	return Registries{Hosts: d.hosts, Env: d.env}
}

type derivation struct {
	getenv     func(string) string
	root, home string
	hosts      []string
	env        []string
}

// sys is a system-wide configuration file.
func (d *derivation) sys(p string) string { return filepath.Join(d.root, p) }

// inHome is a file under the worker's HOME; "" without one.
func (d *derivation) inHome(rel string) string {
	if d.home == "" {
		return ""
	}
	return filepath.Join(d.home, rel)
}

// configDir is os.UserConfigDir as the worker's environment has it.
func (d *derivation) configDir() string {
	if x := d.getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
		return x
	}
	return d.inHome(".config")
}

func (d *derivation) addHost(h string) {
	if _, err := parseHostRule(h); err == nil && !slices.Contains(d.hosts, h) {
		d.hosts = append(d.hosts, h)
	}
}

// addURL allows the host of an http(s) registry URL; cargo's "sparse+" and "git+"
// prefixes are dropped; anything else (direct, off, file://) adds nothing.
func (d *derivation) addURL(raw string) {
	raw = strings.TrimSpace(raw)
	for _, pre := range []string{"sparse+", "git+", "registry+"} {
		raw = strings.TrimPrefix(raw, pre)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return
	}
	h := strings.ToLower(u.Hostname())
	if p := u.Port(); p != "" && p != "80" && p != "443" {
		h += ":" + p
	} else if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	d.addHost(h)
}

func (d *derivation) setEnv(name, value string) {
	if value != "" {
		d.env = append(d.env, name+"="+value)
	}
}

func (d *derivation) golang() {
	file := map[string]string{}
	if p := d.getenv("GOENV"); p != "off" {
		if p == "" {
			if c := d.configDir(); c != "" {
				p = filepath.Join(c, "go", "env")
			}
		}
		if p != "" {
			file = readKeyValues(p)
		}
	}
	val := func(n string) string {
		if v := d.getenv(n); v != "" {
			return v
		}
		return file[n]
	}
	for _, n := range goEnv {
		v := val(n)
		switch n {
		case "GOPROXY":
			for _, e := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '|' }) {
				if e = strings.TrimSpace(e); e != "direct" && e != "off" && !strings.Contains(e, "://") {
					e = "https://" + e
				}
				d.addURL(e)
			}
			v = mapURLs(v, ",|")
		case "GOSUMDB":
			// name[+key] [url]: the database is at url, else at https://name.
			f := strings.Fields(v)
			switch {
			case len(f) == 0 || f[0] == "off":
			case len(f) > 1:
				d.addURL(f[1])
			default:
				name, _, _ := strings.Cut(f[0], "+")
				d.addURL("https://" + name)
			}
			v = mapURLs(v, " ")
		}
		d.setEnv(n, v)
	}
}

// npm: npm_config_registry (any case) over the user's npmrc over the global one; scoped
// "@scope:registry" keys too. Nothing else is kept: not the auth keys (_authToken,
// _auth, _password, certificates), not the "//host/:" lines.
func (d *derivation) npm() {
	settings := map[string]string{}
	var files []string
	if g := firstSet(d.getenv, "NPM_CONFIG_GLOBALCONFIG", "npm_config_globalconfig"); g != "" {
		files = append(files, g)
	} else {
		files = append(files, d.sys("/usr/etc/npmrc"), d.sys("/usr/local/etc/npmrc"), d.sys("/etc/npmrc"))
	}
	files = append(files, cmpOr(firstSet(d.getenv, "NPM_CONFIG_USERCONFIG", "npm_config_userconfig"), d.inHome(".npmrc")))
	for _, f := range files {
		for k, v := range readINI(f, d.getenv, "") {
			if npmRegistryKey(k) {
				settings[k] = v
			}
		}
	}
	for _, n := range []string{"NPM_CONFIG_REGISTRY", "npm_config_registry"} {
		if v := d.getenv(n); v != "" {
			settings["registry"] = v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		v := settings[k]
		d.addURL(v)
		// npm reads npm_config_<key>, turning "_" into "-": a scope with "_" cannot be
		// set this way.
		if !strings.Contains(k, "_") {
			d.setEnv("npm_config_"+k, stripUserinfo(v))
		}
	}
}

func npmRegistryKey(k string) bool {
	if k == "registry" {
		return true
	}
	scope, ok := strings.CutSuffix(k, ":registry")
	return ok && strings.HasPrefix(scope, "@") && len(scope) > 1 && !strings.ContainsAny(scope, "/:= ")
}

// pip: PIP_INDEX_URL and PIP_EXTRA_INDEX_URL over PIP_CONFIG_FILE over the user's
// pip.conf over the system's, as pip reads them.
func (d *derivation) pip() {
	var files []string
	files = append(files, d.sys("/etc/xdg/pip/pip.conf"), d.sys("/etc/pip.conf"), d.inHome(".pip/pip.conf"))
	if c := d.configDir(); c != "" {
		files = append(files, filepath.Join(c, "pip", "pip.conf"))
	}
	if f := d.getenv("PIP_CONFIG_FILE"); f != "" && f != "/dev/null" {
		files = append(files, f)
	}
	val := map[string]string{}
	for _, f := range files {
		for _, section := range []string{"global", "download", "install"} {
			for k, v := range readINI(f, nil, section) {
				k = strings.ReplaceAll(k, "_", "-")
				if k == "index-url" || k == "extra-index-url" {
					val[k] = v
				}
			}
		}
	}
	for name, key := range map[string]string{"PIP_INDEX_URL": "index-url", "PIP_EXTRA_INDEX_URL": "extra-index-url"} {
		if v := d.getenv(name); v != "" {
			val[key] = v
		}
	}
	for _, u := range strings.Fields(val["index-url"] + " " + val["extra-index-url"]) {
		d.addURL(u)
	}
	d.setEnv("PIP_INDEX_URL", mapURLs(val["index-url"], ""))
	d.setEnv("PIP_EXTRA_INDEX_URL", mapURLs(strings.Join(strings.Fields(val["extra-index-url"]), " "), " "))
}

func (d *derivation) uv() {
	for _, n := range uvEnv {
		v := d.getenv(n)
		for _, e := range strings.Fields(v) {
			if name, u, ok := strings.Cut(e, "="); ok && !strings.Contains(name, "://") {
				e = u // name=URL
			}
			d.addURL(e)
		}
		d.setEnv(n, mapURLs(v, " "))
	}
}

// cargoKey matches the keys of cargo's configuration that name a registry: a source
// replacement's registry, a named registry's index, the default registry's index. It is
// compiled on first use, as envRef is: this binary is also every box's init.
var cargoKey = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(source\.[^.]+\.registry|registries\.[^.]+\.index|registry\.index)$`)
})

func (d *derivation) cargo() {
	home := cmpOr(d.getenv("CARGO_HOME"), d.inHome(".cargo"))
	if home == "" {
		return
	}
	for _, name := range []string{"config.toml", "config"} {
		vals := readTOMLStrings(filepath.Join(home, name))
		for _, k := range slices.Sorted(maps.Keys(vals)) {
			if !cargoKey().MatchString(k) {
				continue
			}
			d.addURL(vals[k])
			// A named registry can be given to cargo in its environment; a source
			// replacement cannot.
			if name, ok := strings.CutPrefix(strings.TrimSuffix(k, ".index"), "registries."); ok && envName(cargoEnvName(name)) {
				d.setEnv("CARGO_REGISTRIES_"+cargoEnvName(name)+"_INDEX", stripUserinfo(vals[k]))
			}
		}
	}
}

func cargoEnvName(registry string) string {
	return strings.ToUpper(strings.ReplaceAll(registry, "-", "_"))
}

// maven: the URLs of the mirrors, repositories and plugin repositories of the user's
// settings.xml.
func (d *derivation) maven() {
	p := d.inHome(".m2/settings.xml")
	if p == "" {
		return
	}
	b, err := readRegular(p, true)
	if err != nil {
		return
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	var stack []string
	for {
		tok, err := dec.Token()
		if err != nil {
			return
		}
		switch t := tok.(type) {
		case xml.StartElement:
			stack = append(stack, t.Name.Local)
		case xml.EndElement:
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case xml.CharData:
			if n := len(stack); n >= 2 && stack[n-1] == "url" && slices.Contains([]string{"mirror", "repository", "pluginRepository"}, stack[n-2]) {
				d.addURL(string(t))
			}
		}
	}
}

// mapURLs strips the userinfo from each URL of a list separated by any of seps ("": the
// whole value is one URL), keeping the separators.
func mapURLs(v, seps string) string {
	if seps == "" {
		return stripUserinfo(v)
	}
	var b strings.Builder
	start := 0
	for i := 0; i <= len(v); i++ {
		if i < len(v) && !strings.ContainsRune(seps, rune(v[i])) {
			continue
		}
		b.WriteString(stripUserinfo(v[start:i]))
		if i < len(v) {
			b.WriteByte(v[i])
		}
		start = i + 1
	}
	return b.String()
}

// stripUserinfo removes user:password@ from a URL (in a name=URL entry too); a value
// that is not a URL is kept as it is.
func stripUserinfo(s string) string {
	i := strings.Index(s, "://")
	if i < 0 {
		return s
	}
	rest := s[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
		return s[:i+3] + rest[at+1:]
	}
	return s
}

// readKeyValues reads KEY=VALUE lines (Go's env file); quoted values are unquoted.
func readKeyValues(p string) map[string]string {
	out := map[string]string{}
	b, err := readRegular(p, true)
	if err != nil {
		return out
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || k == "" || strings.HasPrefix(k, "#") {
			continue
		}
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		out[strings.TrimSpace(k)] = v
	}
	return out
}

var envRef = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`) })

// readINI reads the key = value lines of an ini file (npmrc, pip.conf) in section ("":
// outside any section), with pip's indented continuation lines joined by a space and,
// with getenv, npm's ${VAR} references expanded. Keys are lower case.
func readINI(p string, getenv func(string) string, section string) map[string]string {
	out := map[string]string{}
	if p == "" {
		return out
	}
	b, err := readRegular(p, true)
	if err != nil {
		return out
	}
	cur, last := "", ""
	sc := bufio.NewScanner(io.LimitReader(bytes.NewReader(b), maxConfigFile))
	sc.Buffer(nil, maxConfigFile)
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			last = ""
			continue
		case line[0] == '[' && strings.HasSuffix(line, "]"):
			cur, last = strings.ToLower(strings.TrimSpace(line[1:len(line)-1])), ""
			continue
		case raw[0] == ' ' || raw[0] == '\t':
			if last != "" && cur == section {
				out[last] = strings.TrimSpace(out[last] + " " + line)
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || cur != section {
			last = ""
			continue
		}
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		if getenv != nil {
			v = envRef().ReplaceAllStringFunc(v, func(m string) string { return getenv(m[2 : len(m)-1]) })
		}
		out[k], last = v, k
	}
	return out
}

// readTOMLStrings reads the string values of a TOML file by dotted key (table headers,
// dotted keys and one-line inline tables joined): enough for cargo's registry settings,
// not a TOML parser.
func readTOMLStrings(p string) map[string]string {
	out := map[string]string{}
	b, err := readRegular(p, true)
	if err != nil {
		return out
	}
	table := ""
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") && !strings.HasPrefix(line, "[[") {
			table = tomlKey(line[1 : len(line)-1])
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		key := tomlKey(k)
		if table != "" {
			key = table + "." + key
		}
		v = strings.TrimSpace(v)
		if inner, ok := strings.CutPrefix(v, "{"); ok {
			inner, _, _ = strings.Cut(inner, "}")
			for kv := range strings.SplitSeq(inner, ",") {
				if ik, iv, ok := strings.Cut(kv, "="); ok {
					if s, ok := tomlString(iv); ok {
						out[key+"."+tomlKey(ik)] = s
					}
				}
			}
			continue
		}
		if s, ok := tomlString(v); ok {
			out[key] = s
		}
	}
	return out
}

// tomlString reads a basic or literal TOML string, with a comment after it.
func tomlString(v string) (string, bool) {
	v = strings.TrimSpace(v)
	if i := strings.Index(v, " #"); i >= 0 {
		v = strings.TrimSpace(v[:i])
	}
	if s, err := strconv.Unquote(v); err == nil {
		return s, true
	}
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		return v[1 : len(v)-1], true
	}
	return "", false
}

// tomlKey normalises a dotted TOML key: parts trimmed and unquoted.
func tomlKey(k string) string {
	parts := strings.Split(k, ".")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if u, err := strconv.Unquote(p); err == nil {
			p = u
		}
		parts[i] = p
	}
	return strings.Join(parts, ".")
}
