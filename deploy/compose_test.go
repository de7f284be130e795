package deploy_test

import (
	"maps"
	"os"
	"path/filepath"
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
