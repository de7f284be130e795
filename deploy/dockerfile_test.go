package deploy_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"golang.org/x/mod/semver"
)

// dockerfile is a parsed Dockerfile: its instructions with ARG defaults expanded.
type dockerfile struct {
	path   string
	stages []stage
	args   map[string]string // every ARG default, global or of a stage
}

type stage struct {
	image, name  string
	from         string // the FROM word as written, before expansion
	instructions []instruction
}

type instruction struct {
	cmd   string   // lowercase: run, user, healthcheck …
	args  []string // expanded
	flags []string
}

func (s stage) find(cmd string) []instruction {
	var out []instruction
	for _, in := range s.instructions {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

func parseDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	for _, w := range res.Warnings {
		t.Errorf("%s: %s", path, w.Short)
	}
	d := dockerfile{path: path, args: map[string]string{}}
	expand := func(s string) string {
		return os.Expand(s, func(k string) string {
			if v, ok := d.args[k]; ok {
				return v
			}
			return "${" + k + "}"
		})
	}
	for _, n := range res.AST.Children {
		var words []string
		for w := n.Next; w != nil; w = w.Next {
			words = append(words, w.Value)
		}
		cmd := strings.ToLower(n.Value)
		switch cmd {
		case "arg":
			for _, w := range words {
				if k, v, ok := strings.Cut(w, "="); ok {
					d.args[k] = strings.Trim(v, `"`)
				}
			}
		case "from":
			st := stage{image: expand(words[0]), from: words[0]}
			if len(words) == 3 && strings.EqualFold(words[1], "as") {
				st.name = words[2]
			}
			d.stages = append(d.stages, st)
			continue
		}
		if len(d.stages) == 0 {
			continue // global ARGs
		}
		in := instruction{cmd: cmd, flags: n.Flags}
		for _, w := range words {
			in.args = append(in.args, expand(w))
		}
		last := &d.stages[len(d.stages)-1]
		last.instructions = append(last.instructions, in)
	}
	if len(d.stages) == 0 {
		t.Fatalf("%s has no FROM", path)
	}
	return d
}

var imageTag = regexp.MustCompile(`^[a-z0-9./-]+:([A-Za-z0-9._-]+)$`)

// imageProblem requires a tag that carries a version number (not latest, not a bare
// codename), so a rebuild gets the same major.minor.
func imageProblem(image string) string {
	m := imageTag.FindStringSubmatch(image)
	if m == nil {
		return "FROM " + image + " has no tag (or an unexpanded ARG)"
	}
	if tag := m[1]; tag == "latest" || !regexp.MustCompile(`\d+\.\d+`).MatchString(tag) {
		return "FROM " + image + " is not pinned to a version"
	}
	return ""
}

// npmPackages returns the packages of every `npm install` in the stage's RUN lines.
func npmPackages(s stage) []string {
	var pkgs []string
	for _, run := range s.find("run") {
		for _, cmd := range strings.FieldsFunc(strings.Join(run.args, " "), func(r rune) bool { return r == '&' || r == ';' || r == '|' }) {
			f := strings.Fields(strings.ReplaceAll(cmd, `"`, ""))
			if len(f) < 2 || f[0] != "npm" || (f[1] != "install" && f[1] != "i" && f[1] != "add") {
				continue
			}
			for _, a := range f[2:] {
				if !strings.HasPrefix(a, "-") && a != "\\" {
					pkgs = append(pkgs, a)
				}
			}
		}
	}
	return pkgs
}

// npmProblems requires every npm package to be pinned to an exact version.
func npmProblems(pkgs []string) []string {
	var out []string
	for _, p := range pkgs {
		at := strings.LastIndex(p, "@")
		if at <= 0 {
			out = append(out, "npm package "+p+" is not pinned")
			continue
		}
		if v := "v" + p[at+1:]; !semver.IsValid(v) || semver.Canonical(v) != v {
			out = append(out, "npm package "+p+" is not pinned to an exact version")
		}
	}
	return out
}

// imageProblems checks what every image must have: pinned bases, a non-root USER, one
// HEALTHCHECK, an ENTRYPOINT and exact npm versions.
func imageProblems(d dockerfile) []string {
	var out []string
	final := d.stages[len(d.stages)-1]
	if users := final.find("user"); len(users) == 0 {
		out = append(out, "the final stage sets no USER: it would run as root")
	} else if u := strings.Split(users[len(users)-1].args[0], ":")[0]; u == "root" || u == "0" {
		out = append(out, "USER "+u)
	}
	if hc := final.find("healthcheck"); len(hc) != 1 || len(hc[0].args) == 0 || hc[0].args[0] != "CMD" {
		out = append(out, "no HEALTHCHECK CMD")
	}
	if len(final.find("entrypoint")) != 1 {
		out = append(out, "no ENTRYPOINT")
	}
	for _, st := range d.stages {
		if p := imageProblem(st.image); p != "" {
			out = append(out, p)
		}
	}
	return append(out, npmProblems(npmPackages(final))...)
}

func checkFinalStage(t *testing.T, d dockerfile) stage {
	t.Helper()
	for _, p := range imageProblems(d) {
		t.Errorf("%s: %s", d.path, p)
	}
	// The binary is stamped as `make release` stamps it (internal/version's variables).
	var stamped bool
	for _, run := range d.stages[0].find("run") {
		stamped = stamped || strings.Contains(strings.Join(run.args, " "), "-X github.com/whilly-go/whilly/internal/version.version=")
	}
	if !stamped || !strings.Contains(repoFile(t, "internal/version/version.go"), "\tversion = \"\"") {
		t.Errorf("%s: the build stage does not set internal/version's version with -ldflags -X", d.path)
	}
	if _, err := os.Stat(d.path + ".dockerignore"); err != nil {
		t.Errorf("%s: no .dockerignore next to it: %v", d.path, err)
	}
	return d.stages[len(d.stages)-1]
}

func TestServeDockerfile(t *testing.T) {
	t.Parallel()
	d := parseDockerfile(t, "docker/serve.Dockerfile")
	final := checkFinalStage(t, d)
	if e := final.find("entrypoint"); len(e) == 1 && !slices.Equal(e[0].args, []string{"whilly"}) {
		t.Errorf("ENTRYPOINT %v", e[0].args)
	}
	hc := strings.Join(final.find("healthcheck")[0].args, " ")
	if !strings.Contains(hc, "/healthz") || !strings.Contains(hc, ":8000") {
		t.Errorf("HEALTHCHECK %q does not call /healthz on the listen port", hc)
	}
	if !strings.Contains(strings.Join(final.find("env")[0].args, " "), "0.0.0.0:8000") {
		t.Error("serve image does not listen on 0.0.0.0:8000")
	}
	// The planner and the failure analyzer run their agent in bubblewrap, like a worker's.
	checkAgentBox(t, d, final, []string{"bubblewrap", "git", "ca-certificates"}, []string{"@anthropic-ai/claude-code"})
	// Claude Code at the worker's version: one pin for both images.
	worker := parseDockerfile(t, "docker/worker.Dockerfile")
	if got, want := d.args["CLAUDE_CODE_VERSION"], worker.args["CLAUDE_CODE_VERSION"]; got != want {
		t.Errorf("serve image pins Claude Code %s, the worker image %s", got, want)
	}
	checkGoImage(t, d)
}

func TestWorkerDockerfile(t *testing.T) {
	t.Parallel()
	d := parseDockerfile(t, "docker/worker.Dockerfile")
	final := checkFinalStage(t, d)
	// The box is a development environment: the common toolchains are in the image.
	checkAgentBox(t, d, final, []string{"bubblewrap", "git", "ca-certificates", "python3", "python3-pip", "python3-venv", "build-essential"},
		[]string{"@anthropic-ai/claude-code", "@openai/codex"})
	goCopied := false
	for _, c := range final.find("copy") {
		goCopied = goCopied || slices.Contains(c.args, "/usr/local/go")
	}
	env := ""
	for _, e := range final.find("env") {
		env += strings.Join(e.args, " ")
	}
	if !goCopied || !strings.Contains(env, "/usr/local/go/bin") {
		t.Errorf("the worker image does not ship Go on its PATH (copied: %v, env: %s)", goCopied, env)
	}
	checkGoImage(t, d)
}

// checkAgentBox: the final stage installs the Debian packages apt and exactly the npm
// packages npm (the agent CLIs, pinned by imageProblems), on a Node the CLIs run on, and
// names the claude binary in CLAUDE_BIN.
func checkAgentBox(t *testing.T, d dockerfile, final stage, apt, npm []string) {
	t.Helper()
	var runs string
	for _, run := range final.find("run") {
		runs += strings.Join(run.args, " ")
	}
	for _, pkg := range apt {
		if !regexp.MustCompile(`apt-get install [^&]*\b` + pkg + `\b`).MatchString(runs) {
			t.Errorf("%s: the image does not install %s", d.path, pkg)
		}
	}
	pkgs := npmPackages(final)
	var names []string
	for _, p := range pkgs {
		names = append(names, p[:max(strings.LastIndex(p, "@"), 0)])
	}
	slices.Sort(names)
	if !slices.Equal(names, npm) {
		t.Errorf("%s: npm packages = %v, want %v", d.path, pkgs, npm)
	}
	// Claude Code 2.1 needs Node >= 22.
	if m := regexp.MustCompile(`^node:(\d+)\.`).FindStringSubmatch(final.image); m == nil || len(m[1]) < 2 || m[1] < "22" {
		t.Errorf("%s: final base %s: Claude Code needs Node >= 22", d.path, final.image)
	}
	if got := envValue(final, "CLAUDE_BIN"); got != "/usr/local/bin/claude" {
		t.Errorf("%s: ENV CLAUDE_BIN=%q, want /usr/local/bin/claude", d.path, got)
	}
}

// envValue is the last value the stage's ENV instructions give name (the parser gives
// each as name, value, "=").
func envValue(s stage, name string) string {
	var v string
	for _, e := range s.find("env") {
		for i := 0; i+1 < len(e.args); i += 3 {
			if e.args[i] == name {
				v = e.args[i+1]
			}
		}
	}
	return v
}

// Every base is a build argument with a pinned default, and `make images` (which has no
// registry to pull from) passes each of them its local base.
func TestDockerfileBasesAreBuildArgs(t *testing.T) {
	t.Parallel()
	script := repoFile(t, "deploy/images/build.sh")
	for _, path := range []string{"docker/serve.Dockerfile", "docker/worker.Dockerfile"} {
		d := parseDockerfile(t, path)
		names := map[string]bool{}
		for _, st := range d.stages {
			if names[st.from] {
				continue // FROM an earlier stage
			}
			names[st.name] = true
			m := regexp.MustCompile(`^\$\{([A-Z_]+)\}$`).FindStringSubmatch(st.from)
			if m == nil {
				t.Errorf("%s: FROM %s is hard-wired: make it a build argument (ARG NAME=default, FROM ${NAME})", path, st.from)
				continue
			}
			if d.args[m[1]] == "" {
				t.Errorf("%s: FROM ${%s} has no default", path, m[1])
			}
			if !strings.Contains(script, "--build-arg "+m[1]+"=") {
				t.Errorf("deploy/images/build.sh does not pass %s (the base of %s) a local base", m[1], path)
			}
		}
	}
}

// checkGoImage: the build stage's Go is at least the go directive of whilly's go.mod.
func checkGoImage(t *testing.T, d dockerfile) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+(\.\d+)?)$`).FindStringSubmatch(repoFile(t, "go.mod"))
	g := regexp.MustCompile(`^golang:(\d+\.\d+\.\d+)-`).FindStringSubmatch(d.stages[0].image)
	if m == nil || g == nil || semver.Compare("v"+g[1], "v"+m[1]) < 0 {
		t.Errorf("%s: build image %s; go.mod needs go %v", d.path, d.stages[0].image, m)
	}
}

// The checks really fail on what they look for (guards the test itself).
func TestDockerfileChecksCatchBadFiles(t *testing.T) {
	t.Parallel()
	bad := t.TempDir() + "/bad.Dockerfile"
	body := "ARG BASE=debian:bookworm-slim\nFROM golang:1.26.8-trixie AS build\nRUN go build -o /out/x .\n" +
		"FROM ${BASE}\nRUN npm install -g @openai/codex@latest left-pad \"@anthropic-ai/claude-code@^2.1.0\"\nENTRYPOINT [\"x\"]\n"
	if err := os.WriteFile(bad, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	got := imageProblems(parseDockerfile(t, bad))
	want := []string{
		"the final stage sets no USER: it would run as root",
		"no HEALTHCHECK CMD",
		"FROM debian:bookworm-slim is not pinned to a version",
		"npm package @openai/codex@latest is not pinned to an exact version",
		"npm package left-pad is not pinned",
		"npm package @anthropic-ai/claude-code@^2.1.0 is not pinned to an exact version",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems of a bad Dockerfile:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p := imageProblem("debian:latest"); p == "" {
		t.Error("debian:latest passes as pinned")
	}
}
