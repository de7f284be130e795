package sandbox

import (
	"slices"
	"strings"
	"testing"
)

// writeFiles writes files (path relative to dir: body) under dir.
// The registries come from the worker's environment and its clients' configuration
// files; the box gets the settings without a credential.
func TestDeriveRegistries(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		env       map[string]string // HOME is set to the case's fake home
		home, sys map[string]string // files under HOME and under the system root
		hosts     []string          // hosts besides the defaults
		boxEnv    []string          // exactly the box's registry variables
	}{
		{name: "nothing configured"},
		{
			name:   "go from the environment",
			env:    map[string]string{"GOPROXY": "https://user:pw@goproxy.corp.example:8443/mod,https://goproxy.io|direct", "GOSUMDB": "sum.corp.example+abc https://sumdb.corp.example", "GOPRIVATE": "*.corp.example", "GOFLAGS": "-mod=mod"},
			hosts:  []string{"goproxy.corp.example:8443", "goproxy.io", "sumdb.corp.example"},
			boxEnv: []string{"GOPROXY=https://goproxy.corp.example:8443/mod,https://goproxy.io|direct", "GOSUMDB=sum.corp.example+abc https://sumdb.corp.example", "GOPRIVATE=*.corp.example", "GOFLAGS=-mod=mod"},
		},
		{
			name:   "go env file, the environment wins",
			env:    map[string]string{"GONOSUMDB": "example.org/private"},
			home:   map[string]string{".config/go/env": "GOPROXY=https://athens.example\nGOSUMDB=off\nGONOSUMDB=from-file\nGOTOOLCHAIN=local\n"},
			hosts:  []string{"athens.example"},
			boxEnv: []string{"GOPROXY=https://athens.example", "GOSUMDB=off", "GONOSUMDB=example.org/private", "GOTOOLCHAIN=local"},
		},
		{
			name:   "GOENV names the file",
			env:    map[string]string{"GOENV": "/dev/null/none", "XDG_CONFIG_HOME": "/nonexistent"},
			home:   map[string]string{".config/go/env": "GOPROXY=https://ignored.example\n"},
			boxEnv: nil,
		},
		{
			name:  "npmrc: user over global, scoped, tokens never",
			home:  map[string]string{".npmrc": "registry=https://npm.corp.example/\n//npm.corp.example/:_authToken=npm_SECRET\n_auth=c2VjcmV0\n@acme:registry=https://acme.example/npm/\n@bad_scope:registry=https://bad.example/\nalways-auth=true\n"},
			sys:   map[string]string{"etc/npmrc": "registry=https://global.example/\n@glob:registry = \"https://glob.example/\"\n"},
			hosts: []string{"acme.example", "bad.example", "glob.example", "npm.corp.example"},
			boxEnv: []string{"npm_config_@acme:registry=https://acme.example/npm/", "npm_config_@glob:registry=https://glob.example/",
				"npm_config_registry=https://npm.corp.example/"},
		},
		{
			name:   "npm_config_registry wins, userinfo stripped, ${VAR} expanded",
			env:    map[string]string{"NPM_CONFIG_REGISTRY": "https://u:p@envreg.example/", "REG": "https://fromvar.example/"},
			home:   map[string]string{".npmrc": "@v:registry=${REG}\n"},
			hosts:  []string{"fromvar.example", "envreg.example"},
			boxEnv: []string{"npm_config_@v:registry=https://fromvar.example/", "npm_config_registry=https://envreg.example/"},
		},
		{
			name:  "pip.conf files and the environment",
			env:   map[string]string{"PIP_EXTRA_INDEX_URL": "https://tok@extra1.example/simple https://extra2.example/simple"},
			home:  map[string]string{".config/pip/pip.conf": "[global]\nindex-url = https://user:pass@pypi.corp.example/simple\nextra-index-url =\n    https://ignored.example/simple\n    https://ignored2.example/simple\n"},
			sys:   map[string]string{"etc/pip.conf": "[global]\nindex-url = https://sys.example/simple\n[install]\ntrusted-host = x\n"},
			hosts: []string{"pypi.corp.example", "extra1.example", "extra2.example"},
			boxEnv: []string{"PIP_INDEX_URL=https://pypi.corp.example/simple",
				"PIP_EXTRA_INDEX_URL=https://extra1.example/simple https://extra2.example/simple"},
		},
		{
			name:   "PIP_CONFIG_FILE and continuation lines",
			env:    map[string]string{"PIP_CONFIG_FILE": "{home}/custom.conf"},
			home:   map[string]string{"custom.conf": "[install]\nextra-index-url =\n    https://a.example/simple\n    https://b.example:8080/simple\n"},
			hosts:  []string{"a.example", "b.example:8080"},
			boxEnv: []string{"PIP_EXTRA_INDEX_URL=https://a.example/simple https://b.example:8080/simple"},
		},
		{
			name:   "uv",
			env:    map[string]string{"UV_INDEX_URL": "https://uv.example/simple", "UV_INDEX": "corp=https://me:tok@uvcorp.example/simple https://uv2.example/simple", "UV_EXTRA_INDEX_URL": "file:///srv/wheels"},
			hosts:  []string{"uv.example", "uvcorp.example", "uv2.example"},
			boxEnv: []string{"UV_INDEX_URL=https://uv.example/simple", "UV_EXTRA_INDEX_URL=file:///srv/wheels", "UV_INDEX=corp=https://uvcorp.example/simple https://uv2.example/simple"},
		},
		{
			name: "cargo source replacement and registries",
			home: map[string]string{".cargo/config.toml": `[source.crates-io]
replace-with = "mirror"

[source.mirror]
registry = "sparse+https://cargo.corp.example/index/"

[source.vendored]
directory = "vendor"

[registries]
acme = { index = "https://inline.example/", token = "SECRET" }

[registries.internal]
index = "sparse+https://crates.internal.example/" # comment
token = "SECRET"

[net]
git-fetch-with-cli = true
`},
			hosts:  []string{"inline.example", "crates.internal.example", "cargo.corp.example"},
			boxEnv: []string{"CARGO_REGISTRIES_ACME_INDEX=https://inline.example/", "CARGO_REGISTRIES_INTERNAL_INDEX=sparse+https://crates.internal.example/"},
		},
		{
			name:   "CARGO_HOME",
			env:    map[string]string{"CARGO_HOME": "{home}/cargo"},
			home:   map[string]string{"cargo/config.toml": "registries.x.index = 'https://x.example/git/index'\n"},
			hosts:  []string{"x.example"},
			boxEnv: []string{"CARGO_REGISTRIES_X_INDEX=https://x.example/git/index"},
		},
		{
			name: "maven mirrors and repositories",
			home: map[string]string{".m2/settings.xml": `<settings>
  <servers><server><id>corp</id><password>SECRET</password></server></servers>
  <mirrors><mirror><id>corp</id><url>https://maven.corp.example/repo</url><mirrorOf>*</mirrorOf></mirror></mirrors>
  <profiles><profile><repositories><repository><url>http://repo.example:8081/m2</url></repository></repositories>
  <pluginRepositories><pluginRepository><url>https://plugins.example/m2</url></pluginRepository></pluginRepositories></profile></profiles>
  <proxies><proxy><host>not-a-registry.example</host></proxy></proxies>
</settings>`},
			hosts: []string{"maven.corp.example", "repo.example:8081", "plugins.example"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			home, root := t.TempDir(), t.TempDir()
			writeFiles(t, home, c.home)
			writeFiles(t, root, c.sys)
			env := map[string]string{"HOME": home}
			for k, v := range c.env {
				env[k] = strings.ReplaceAll(v, "{home}", home)
			}
			r := deriveRegistries(func(k string) string { return env[k] }, root)
			want := append(slices.Clone(defaultRegistries), c.hosts...)
			if !slices.Equal(r.Hosts, want) {
				t.Errorf("hosts =\n %q\nwant\n %q", r.Hosts, want)
			}
			if !slices.Equal(r.Env, c.boxEnv) {
				t.Errorf("box env =\n %q\nwant\n %q", r.Env, c.boxEnv)
			}
			for _, kv := range r.Env {
				for _, secret := range []string{"SECRET", "c2VjcmV0", "pw@", "p@", "pass@", "tok@", "_auth"} {
					if strings.Contains(kv, secret) {
						t.Errorf("%q carries a credential", kv)
					}
				}
			}
		})
	}
}

func TestStripUserinfo(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://u:p@h.example/x":         "https://h.example/x",
		"https://h.example/x?u=a@b":       "https://h.example/x?u=a@b",
		"https://a@b@h.example:8080/":     "https://h.example:8080/",
		"direct":                          "direct",
		"name=https://t@h.example/simple": "name=https://h.example/simple",
	} {
		if got := stripUserinfo(in); got != want {
			t.Errorf("stripUserinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

// WHILLY_SANDBOX_REGISTRIES: auto (the default) lets the registries through, off does
// not; the box's clients get the worker's registry settings either way.
func TestRegistriesSetting(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFiles(t, home, map[string]string{".npmrc": "registry=https://npm.corp.example/\n"})
	env := map[string]string{"HOME": home, "ANTHROPIC_BASE_URL": "https://gateway.example"}
	getenv := func(k string) string { return env[k] }
	for _, mode := range []string{"", "auto", "AUTO", "off"} {
		env["WHILLY_SANDBOX_REGISTRIES"] = mode
		set, err := SettingsFromEnv(getenv)
		if err != nil {
			t.Fatalf("%q: %v", mode, err)
		}
		set.Mode = ModeNone // New then needs no bubblewrap: the settings are what is tested
		s, err := New(Config{Settings: set})
		if err != nil {
			t.Fatal(err)
		}
		s.mode = ModeBwrap
		hosts := s.AllowedHosts(AgentClaude, getenv)
		on := mode != "off"
		if s.Registries() != on || slices.Contains(hosts, "npm.corp.example") != on || slices.Contains(hosts, "proxy.golang.org") != on {
			t.Errorf("%q: registries %v, hosts %q", mode, s.Registries(), hosts)
		}
		if !slices.Contains(hosts, "gateway.example") {
			t.Errorf("%q: the model API is not allowed: %q", mode, hosts)
		}
		if !slices.Contains(s.registryEnv, "npm_config_registry=https://npm.corp.example/") {
			t.Errorf("%q: the box's registry settings: %q", mode, s.registryEnv)
		}
	}
	env["WHILLY_SANDBOX_REGISTRIES"] = "some"
	if _, err := SettingsFromEnv(getenv); err == nil {
		t.Error("WHILLY_SANDBOX_REGISTRIES=some accepted")
	}
	env["WHILLY_SANDBOX_REGISTRIES"] = ""
	env["HTTPS_PROXY"] = "socks5://u:hunter2@corp:1080"
	if _, err := SettingsFromEnv(getenv); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("an HTTPS_PROXY the proxy cannot chain through: %v", err)
	}
}

// Settings that were not derived from an environment still let the ecosystems' default
// registries through.
func TestZeroSettingsAllowTheDefaultRegistries(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Settings: Settings{Mode: ModeNone}})
	if err != nil {
		t.Fatal(err)
	}
	s.mode, s.net = ModeBwrap, NetProxy
	got := s.AllowedHosts(AgentNone, func(string) string { return "" })
	if !slices.Equal(got, defaultRegistries) {
		t.Errorf("allowed = %q", got)
	}
}
