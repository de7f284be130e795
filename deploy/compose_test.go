package deploy_test

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

const composeFile = "compose/compose.yaml"

// loadCompose loads the compose file as `docker compose config` does: schema validation,
// interpolation of env (the .env file's role), normalization and consistency checks.
func loadCompose(t *testing.T, env map[string]string) (*types.Project, error) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Dir(composeFile))
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	return loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "compose.yaml"), Content: body}},
		Environment: env,
	}, func(o *loader.Options) { o.SetProjectName("whilly", true) })
}

func TestComposeLoads(t *testing.T) {
	t.Parallel()
	p, err := loadCompose(t, map[string]string{"POSTGRES_PASSWORD": "pw", "WHILLY_BOOTSTRAP_TOKEN": "boot", "WHILLY_WORKERS": "5"})
	if err != nil {
		t.Fatalf("load %s: %v", composeFile, err)
	}
	if got := slices.Sorted(maps.Keys(p.Services)); !slices.Equal(got, []string{"migrate", "postgres", "serve", "worker"}) {
		t.Fatalf("services = %v", got)
	}
	pg, migrate, serve, worker := p.Services["postgres"], p.Services["migrate"], p.Services["serve"], p.Services["worker"]

	if !strings.Contains(pg.Image, ":") || strings.HasSuffix(pg.Image, ":latest") || pg.HealthCheck == nil {
		t.Errorf("postgres: image %q (pinned?), healthcheck %v", pg.Image, pg.HealthCheck)
	}
	if d := migrate.DependsOn["postgres"]; d.Condition != types.ServiceConditionHealthy {
		t.Errorf("migrate waits for postgres with %q, want service_healthy", d.Condition)
	}
	if !slices.Equal([]string(migrate.Command), []string{"migrate", "up"}) {
		t.Errorf("migrate command = %v", migrate.Command)
	}
	if d := serve.DependsOn["migrate"]; d.Condition != types.ServiceConditionCompletedSuccessfully {
		t.Errorf("serve waits for migrate with %q, want service_completed_successfully", d.Condition)
	}
	if d := worker.DependsOn["serve"]; d.Condition != types.ServiceConditionHealthy {
		t.Errorf("worker waits for serve with %q, want service_healthy (the image's HEALTHCHECK)", d.Condition)
	}
	dsn := "postgres://whilly:pw@postgres:5432/whilly?sslmode=disable"
	for _, s := range []types.ServiceConfig{migrate, serve} {
		if v := s.Environment["WHILLY_DATABASE_URL"]; v == nil || *v != dsn {
			t.Errorf("%s: WHILLY_DATABASE_URL = %v, want %s", s.Name, v, dsn)
		}
	}
	if v := serve.Environment["WHILLY_LISTEN"]; v == nil || *v != "0.0.0.0:8000" {
		t.Errorf("serve listens on %v", v)
	}
	if len(serve.Ports) != 1 || serve.Ports[0].Target != 8000 || serve.Ports[0].HostIP != "127.0.0.1" {
		t.Errorf("serve ports = %+v, want 8000 published on 127.0.0.1", serve.Ports)
	}
	if v := worker.Environment["WHILLY_CONTROL_URL"]; v == nil || *v != "http://serve:8000" {
		t.Errorf("worker WHILLY_CONTROL_URL = %v", v)
	}
	if v := worker.Environment["WHILLY_BOOTSTRAP_TOKEN"]; v == nil || *v != "boot" {
		t.Errorf("worker WHILLY_BOOTSTRAP_TOKEN = %v", v)
	}
	if worker.Deploy == nil || worker.Deploy.Replicas == nil || *worker.Deploy.Replicas != 5 {
		t.Errorf("worker replicas = %+v, want WHILLY_WORKERS=5", worker.Deploy)
	}
	for _, opt := range []string{"seccomp=unconfined", "systempaths=unconfined", "no-new-privileges:true"} {
		if !slices.Contains(worker.SecurityOpt, opt) {
			t.Errorf("worker security_opt %v lacks %s (bubblewrap, and nothing more)", worker.SecurityOpt, opt)
		}
	}
	if !slices.Equal(worker.CapDrop, []string{"ALL"}) {
		t.Errorf("worker cap_drop = %v", worker.CapDrop)
	}
	for _, s := range []types.ServiceConfig{migrate, worker} {
		if s.Build == nil {
			t.Fatalf("%s has no build section", s.Name)
		}
		df := filepath.Join(s.Build.Context, s.Build.Dockerfile)
		if _, err := os.Stat(df); err != nil {
			t.Errorf("%s builds from %s: %v", s.Name, df, err)
		}
		if _, err := os.Stat(filepath.Join(s.Build.Context, "go.mod")); err != nil {
			t.Errorf("%s: the build context %s is not the repository root", s.Name, s.Build.Context)
		}
	}
	if serve.Image != migrate.Image {
		t.Errorf("serve runs %q but migrate builds %q", serve.Image, migrate.Image)
	}

	var names []string
	for _, s := range p.Services {
		names = slices.AppendSeq(names, maps.Keys(s.Environment))
	}
	if bad := unknownVariables(t, names); len(bad) > 0 {
		t.Errorf("compose sets variables whilly does not read: %v", bad)
	}
	// The example .env names every variable compose interpolates without a default.
	example := readFile(t, "compose/whilly.env.example")
	for _, name := range []string{"POSTGRES_PASSWORD", "WHILLY_BOOTSTRAP_TOKEN"} {
		if !strings.Contains(example, "\n"+name+"=") && !strings.HasPrefix(example, name+"=") {
			t.Errorf("whilly.env.example lacks %s", name)
		}
	}
}

func TestComposeRefusesMissingSecrets(t *testing.T) {
	t.Parallel()
	for missing, want := range map[string]string{
		"POSTGRES_PASSWORD":      "set POSTGRES_PASSWORD in .env",
		"WHILLY_BOOTSTRAP_TOKEN": "set WHILLY_BOOTSTRAP_TOKEN in .env",
	} {
		env := map[string]string{"POSTGRES_PASSWORD": "pw", "WHILLY_BOOTSTRAP_TOKEN": "boot"}
		delete(env, missing)
		if _, err := loadCompose(t, env); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("without %s: %v, want an error saying %q", missing, err, want)
		}
	}
}

// docVariables reads the table of docs/configuration.md: each variable (not its _FILE
// form) and the commands that read it.
func docVariables(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for line := range strings.Lines(repoFile(t, "docs/configuration.md")) {
		if !strings.HasPrefix(line, "| `WHILLY_") {
			continue
		}
		// Cells split on the pipes that are not escaped (\|).
		var cells []string
		var cur strings.Builder
		for i := 1; i < len(line); i++ {
			switch {
			case line[i] == '\\' && i+1 < len(line):
				cur.WriteByte(line[i+1])
				i++
			case line[i] == '|':
				cells = append(cells, strings.TrimSpace(cur.String()))
				cur.Reset()
			default:
				cur.WriteByte(line[i])
			}
		}
		if len(cells) < 5 {
			t.Fatalf("docs/configuration.md: a row of %d cells: %s", len(cells), line)
		}
		nonEmpty := cells
		name := strings.Trim(strings.Fields(nonEmpty[0])[0], "`")
		for _, c := range strings.Split(nonEmpty[3], ",") {
			out[name] = append(out[name], strings.TrimSpace(c))
		}
	}
	if len(out) < 40 {
		t.Fatalf("docs/configuration.md lists only %d variables: its table moved?", len(out))
	}
	return out
}

// composeOwned are the variables compose (or the image) sets itself, not from .env.
var composeOwned = map[string][]string{
	"serve":  {"WHILLY_DATABASE_URL", "WHILLY_DATA_DIR", "WHILLY_LISTEN"},
	"worker": {"WHILLY_CONTROL_URL", "WHILLY_WORKSPACE_DIR", "WHILLY_CACHE_DIR", "WHILLY_WORKER_TOKEN", "WHILLY_WORKER_ID"},
}

// Every variable serve or the worker reads reaches its container from .env, and so does
// every variable of whilly.env.example.
func TestComposePassesDocumentedVariables(t *testing.T) {
	t.Parallel()
	docs := docVariables(t)
	reads := func(service, name string) bool {
		cmds := docs[name]
		if service == "serve" {
			return slices.Contains(cmds, "serve") || slices.Contains(cmds, "every whilly command")
		}
		return slices.Contains(cmds, "whilly-worker")
	}
	env := map[string]string{"POSTGRES_PASSWORD": "pw", "WHILLY_BOOTSTRAP_TOKEN": "boot"}
	for name := range docs {
		env[name] = "from-env-" + name
	}
	// The example's names, commented out or not.
	example := regexp.MustCompile(`(?m)^#?\s*([A-Z][A-Z0-9_]*)=`).FindAllStringSubmatch(readFile(t, "compose/whilly.env.example"), -1)
	for _, m := range example {
		if _, ok := env[m[1]]; !ok {
			env[m[1]] = "from-env-" + m[1]
		}
	}
	env["WHILLY_WORKERS"], env["WHILLY_PORT"] = "3", "8080" // numbers
	p, err := loadCompose(t, env)
	if err != nil {
		t.Fatalf("load %s: %v", composeFile, err)
	}
	got := func(service, name string) string {
		if v := p.Services[service].Environment[name]; v != nil {
			return *v
		}
		return ""
	}
	for _, service := range []string{"serve", "worker"} {
		for name := range docs {
			if !reads(service, name) || slices.Contains(composeOwned[service], name) || name == "WHILLY_BOOTSTRAP_TOKEN" {
				continue
			}
			if got(service, name) != env[name] {
				t.Errorf("%s: %s set in .env reaches the container as %q", service, name, got(service, name))
			}
		}
	}
	body := readFile(t, composeFile)
	for _, m := range example {
		name := m[1]
		_, documented := docs[name]
		switch {
		case documented:
			if !reads("serve", name) && !reads("worker", name) {
				t.Errorf("whilly.env.example names %s, which neither serve nor the worker reads", name)
			}
		case name == "ANTHROPIC_API_KEY" || name == "OPENAI_API_KEY":
			if got("worker", name) != env[name] {
				t.Errorf("worker: %s set in .env does not reach the container", name)
			}
		case !strings.Contains(body, "${"+name):
			t.Errorf("whilly.env.example names %s, which compose.yaml does not use", name)
		}
	}
	// A scoped bootstrap token for the workers wins over the fleet's.
	env["WORKER_BOOTSTRAP_TOKEN"], env["WORKER_LABELS"] = "scoped", "gpu,linux"
	if p, err = loadCompose(t, env); err != nil {
		t.Fatal(err)
	}
	if v := p.Services["worker"].Environment["WHILLY_BOOTSTRAP_TOKEN"]; v == nil || *v != "scoped" {
		t.Errorf("worker WHILLY_BOOTSTRAP_TOKEN = %v, want WORKER_BOOTSTRAP_TOKEN's", v)
	}
	if cmd := p.Services["worker"].Command; !slices.Contains([]string(cmd), "--labels=gpu,linux") {
		t.Errorf("worker command %v lacks WORKER_LABELS", cmd)
	}
	if v := p.Services["serve"].Environment["WHILLY_BOOTSTRAP_TOKEN"]; v == nil || *v != env["WHILLY_BOOTSTRAP_TOKEN"] {
		t.Errorf("serve WHILLY_BOOTSTRAP_TOKEN = %v", v)
	}
}

// With compose.planner.yaml, serve gets what bubblewrap needs, as the worker has it.
func TestComposePlannerOverride(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs("compose")
	if err != nil {
		t.Fatal(err)
	}
	var files []types.ConfigFile
	for _, f := range []string{"compose.yaml", "compose.planner.yaml"} {
		files = append(files, types.ConfigFile{Filename: filepath.Join(dir, f), Content: []byte(readFile(t, "compose/"+f))})
	}
	p, err := loader.LoadWithContext(t.Context(), types.ConfigDetails{WorkingDir: dir, ConfigFiles: files,
		Environment: map[string]string{"POSTGRES_PASSWORD": "pw", "WHILLY_BOOTSTRAP_TOKEN": "boot", "WHILLY_PLANNER": "claude", "ANTHROPIC_API_KEY": "sk"}},
		func(o *loader.Options) { o.SetProjectName("whilly", true) })
	if err != nil {
		t.Fatal(err)
	}
	serve, worker := p.Services["serve"], p.Services["worker"]
	if !slices.Equal(serve.SecurityOpt, worker.SecurityOpt) || !slices.Equal(serve.CapDrop, worker.CapDrop) {
		t.Errorf("serve security_opt %v cap_drop %v, want the worker's %v %v", serve.SecurityOpt, serve.CapDrop, worker.SecurityOpt, worker.CapDrop)
	}
	for name, want := range map[string]string{"WHILLY_PLANNER": "claude", "ANTHROPIC_API_KEY": "sk"} {
		if v := serve.Environment[name]; v == nil || *v != want {
			t.Errorf("serve %s = %v, want %s", name, v, want)
		}
	}
	// Without it, serve keeps Docker's default profiles.
	q, err := loadCompose(t, map[string]string{"POSTGRES_PASSWORD": "pw", "WHILLY_BOOTSTRAP_TOKEN": "boot"})
	if err != nil {
		t.Fatal(err)
	}
	if s := q.Services["serve"]; len(s.SecurityOpt) != 0 || s.Environment["ANTHROPIC_API_KEY"] != nil {
		t.Errorf("serve without the override: security_opt %v", s.SecurityOpt)
	}
}
