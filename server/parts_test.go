package server

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/testkit"
)

var discard = slog.New(slog.DiscardHandler)

// envOf is an environment of exactly env, with agents unboxed unless env says otherwise
// (these tests run no agent).
func envOf(env map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := env[k]; ok || k != "WHILLY_SANDBOX" {
			return v
		}
		return sandbox.ModeNone
	}
}

// configOf is FromEnv of env, failing the test on an error.
func configOf(t *testing.T, env map[string]string) Config {
	t.Helper()
	cfg, err := FromEnv(envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// isConfigError reports whether err is a ConfigError whose text names every one of names.
func isConfigError(err error, names ...string) bool {
	var ce *ConfigError
	if !errors.As(err, &ce) {
		return false
	}
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			return false
		}
	}
	return true
}

func TestTRIZPartConfiguration(t *testing.T) {
	t.Parallel()
	build := func(env map[string]string) (*part, error) {
		cfg, err := FromEnv(envOf(env))
		if err != nil {
			return nil, err
		}
		return trizPart(nil, discard, cfg)
	}
	for _, off := range []string{"", "0", "false", "off"} {
		if p, err := build(map[string]string{"WHILLY_TRIZ_ENABLED": off}); p != nil || err != nil {
			t.Errorf("WHILLY_TRIZ_ENABLED=%q: %v, %v; want off", off, p, err)
		}
	}
	for name, env := range map[string]map[string]string{
		"typo":            {"WHILLY_TRIZ_ENABLED": "ture"},
		"bad timeout":     {"WHILLY_TRIZ_ENABLED": "1", "WHILLY_TRIZ_TIMEOUT": "soon"},
		"unknown agent":   {"WHILLY_TRIZ_ENABLED": "1", "WHILLY_TRIZ_AGENT": "gpt"},
		"command, no cmd": {"WHILLY_TRIZ_ENABLED": "1", "WHILLY_AGENT": "command"},
	} {
		if _, err := build(env); !isConfigError(err) {
			t.Errorf("%s: err = %v, want a ConfigError", name, err)
		}
	}
	on := map[string]string{"WHILLY_TRIZ_ENABLED": "1", "WHILLY_AGENT": "codex"}
	p, err := build(on)
	if err != nil || p == nil || p.register == nil {
		t.Fatalf("enabled: %v, %v", p, err)
	}
	// The analyzer's hook is the store's, fixed when the control plane builds it.
	if h := StoreHooks(configOf(t, on), nil, discard); h.TaskFailed == nil || h.PlanChanged != nil {
		t.Fatalf("store hooks with TRIZ on and no App: %+v; want TaskFailed only", h)
	}
	if periodic := p.register(river.NewWorkers()); len(periodic) != 0 {
		t.Errorf("periodic jobs: %d", len(periodic))
	}
}

func TestGitHubPartIsOffWithoutAnAppAndStrictWithOne(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	ctx := context.Background()
	cfg := configOf(t, map[string]string{"WHILLY_DATA_DIR": t.TempDir()})
	if h := StoreHooks(cfg, nil, discard); h.PlanChanged != nil || h.TaskFailed != nil {
		t.Errorf("store hooks without WHILLY_GITHUB_APP_ID: %+v; want none", h)
	}
	if p, err := githubPart(ctx, st, nil, discard, cfg); err != nil || p == nil || p.register != nil ||
		len(p.routes) != 1 || p.routes["/webhook"] == nil || p.github != nil {
		t.Errorf("without WHILLY_GITHUB_APP_ID: %+v, %v; want only /webhook (503)", p, err)
	}
	full := map[string]string{
		"WHILLY_GITHUB_APP_ID": "4242", "WHILLY_GITHUB_PRIVATE_KEY": string(gh.KeyPEM),
		"WHILLY_GITHUB_WEBHOOK_SECRET": "s", "WHILLY_GITHUB_API_URL": gh.URL(), "WHILLY_DATA_DIR": t.TempDir(),
	}
	without := func(missing string) map[string]string {
		env := map[string]string{}
		for k, v := range full {
			if k != missing {
				env[k] = v
			}
		}
		return env
	}
	for _, missing := range []string{"WHILLY_GITHUB_WEBHOOK_SECRET", "WHILLY_GITHUB_PRIVATE_KEY"} {
		if _, err := FromEnv(envOf(without(missing))); !isConfigError(err, missing) {
			t.Errorf("without %s: %v, want a ConfigError naming it", missing, err)
		}
	}
	// A configuration made by hand is checked too: the webhook refuses unsigned
	// deliveries.
	cfg = configOf(t, full)
	noSecret := cfg
	noSecret.GitHub.WebhookSecret = nil
	if _, err := githubPart(ctx, st, nil, discard, noSecret); !isConfigError(err, "WHILLY_GITHUB_WEBHOOK_SECRET") {
		t.Errorf("without a webhook secret: %v, want a ConfigError naming WHILLY_GITHUB_WEBHOOK_SECRET", err)
	}
	p, err := githubPart(ctx, st, nil, discard, cfg)
	if err != nil || p == nil || p.routes["/webhook"] == nil || p.workspaces == nil || p.github == nil {
		t.Fatalf("configured: %+v, %v", p, err)
	}
	if h := StoreHooks(cfg, nil, discard); h.PlanChanged == nil {
		t.Fatalf("store hooks with the App: %+v; want the GitHub side's PlanChanged", h)
	}
	w := river.NewWorkers()
	// The reconciler is enqueued by this process itself, not by whichever process leads
	// River, and the GitHub jobs have a queue that only this process works.
	if periodic := p.register(w); len(periodic) != 0 || len(p.schedules) != 2 || p.schedules[0].Name != ghapp.KindReconcile ||
		p.schedules[1].Name != ghapp.KindRevokePushTokens {
		t.Errorf("%d River periodic jobs and schedules %+v; want the reconciler and the push token sweep scheduled by the process", len(periodic), p.schedules)
	}
	for _, q := range []string{queue.QueueGitHub, queue.QueueGitHubIntake} {
		if _, ok := p.queues[q]; !ok {
			t.Errorf("queues %v do not include %s", p.queues, q)
		}
	}
	// Without WHILLY_DISPATCH_ACTIONS no dispatch worker is registered; with it, one is.
	if err := river.AddWorkerSafely(w, ghapp.NewDispatcher(st, nil, nil, ghapp.DispatchConfig{}).Worker()); err != nil {
		t.Errorf("a dispatch worker was registered without WHILLY_DISPATCH_ACTIONS: %v", err)
	}
	full["WHILLY_DISPATCH_ACTIONS"] = "1"
	if p, err = githubPart(ctx, st, nil, discard, configOf(t, full)); err != nil {
		t.Fatal(err)
	}
	w = river.NewWorkers()
	p.register(w)
	if err := river.AddWorkerSafely(w, ghapp.NewDispatcher(st, nil, nil, ghapp.DispatchConfig{}).Worker()); err == nil {
		t.Error("WHILLY_DISPATCH_ACTIONS=1 registered no dispatch worker")
	}
	full["WHILLY_DISPATCH_ACTIONS"] = "sure"
	if _, err := FromEnv(envOf(full)); !isConfigError(err, "WHILLY_DISPATCH_ACTIONS") {
		t.Errorf("WHILLY_DISPATCH_ACTIONS=sure: %v, want a ConfigError naming it", err)
	}
}

// The intake over a token, without the App, is built only when asked (whilly forge):
// a control plane that serves gets neither it nor its hooks.
func TestGitHubIntakeOverATokenOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	cfg := configOf(t, map[string]string{"WHILLY_GITHUB_TOKEN": "ghp_for_tests", "WHILLY_DATA_DIR": t.TempDir()})
	if p, err := githubPart(context.Background(), st, nil, discard, cfg); err != nil || p.github != nil || StoreHooks(cfg, nil, discard).PlanChanged != nil {
		t.Errorf("a token, serving: %+v, %v; want no intake and no hooks", p, err)
	}
	cfg.GitHub.IntakeOnly = true
	if p, err := githubPart(context.Background(), st, nil, discard, cfg); err != nil || p.github == nil || StoreHooks(cfg, nil, discard).PlanChanged == nil {
		t.Errorf("a token, intake only: %+v, %v; want the intake and its hooks", p, err)
	}
}

// TestTrustedProxiesReachTheWebhook: WHILLY_TRUSTED_PROXIES is read with the App's
// variables and handed to the webhook receiver; a value that is not IPs and CIDRs is
// refused naming the variable.
func TestTrustedProxiesAreRead(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	env := map[string]string{
		"WHILLY_GITHUB_APP_ID": "4242", "WHILLY_GITHUB_PRIVATE_KEY": string(gh.KeyPEM),
		"WHILLY_GITHUB_WEBHOOK_SECRET": "s", "WHILLY_GITHUB_API_URL": gh.URL(), "WHILLY_DATA_DIR": t.TempDir(),
		"WHILLY_TRUSTED_PROXIES": "10.1.0.0/16, 192.0.2.7",
	}
	got := configOf(t, env).GitHub.TrustedProxies
	if want := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("192.0.2.7/32")}; !slices.Equal(got, want) {
		t.Fatalf("trusted proxies %v; want %v", got, want)
	}
	env["WHILLY_TRUSTED_PROXIES"] = "10.1.0.0/16, proxy.internal"
	if _, err := FromEnv(envOf(env)); !isConfigError(err, "WHILLY_TRUSTED_PROXIES", "proxy.internal") {
		t.Errorf("WHILLY_TRUSTED_PROXIES=proxy.internal: %v, want a ConfigError naming it", err)
	}
}

// TestSignInTakesTheClientOfAppCreate: the OAuth client comes from the variables, else
// from the file `whilly app create` writes; with neither there is no GitHub sign-in.
func TestSignInTakesTheClientOfAppCreate(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	id, secret := gh.OAuthClient()
	dir := t.TempDir()
	env := map[string]string{"WHILLY_DATA_DIR": dir, "WHILLY_GITHUB_API_URL": gh.URL()}
	if gs, err := githubSignIn(configOf(t, env), discard); err != nil || gs != nil {
		t.Fatalf("without a client: %v, %v; want none", gs, err)
	}
	if err := ghapp.WriteCredentials(filepath.Join(dir, ghapp.CredentialsFile), ghapp.Credentials{AppID: gh.AppID, PrivateKey: string(gh.KeyPEM),
		WebhookSecret: "s", ClientID: id, ClientSecret: secret}); err != nil {
		t.Fatal(err)
	}
	cfg := configOf(t, env)
	gs, err := githubSignIn(cfg, discard)
	if err != nil || gs == nil || !cfg.SignIn.FromFile {
		t.Fatalf("with the App file: %v, %v, %+v", gs, err, cfg.SignIn)
	}
	if u := gs.AuthorizeURL("https://whilly.test/auth/github/callback", "st", "v"); !strings.Contains(u, "client_id="+id) || !strings.HasPrefix(u, gh.Server.URL+"/login/oauth/authorize?") {
		t.Errorf("authorize URL %s: want the fake's page with the file's client id", u)
	}
	cfg = configOf(t, map[string]string{"WHILLY_DATA_DIR": dir, "WHILLY_GITHUB_CLIENT_ID": "Iv23other", "WHILLY_GITHUB_CLIENT_SECRET": "x"})
	if gs, err := githubSignIn(cfg, discard); err != nil || cfg.SignIn.FromFile || !strings.Contains(gs.AuthorizeURL("https://w/cb", "s", "v"), "client_id=Iv23other") {
		t.Errorf("the variables win over the file: %v", err)
	}
	// Defaults read no file: the App and its client there are not the defaults'.
	if d := Defaults(); d.GitHub.HasApp() || d.SignIn.ClientID != "" || d.GitHub.Intake.Budget <= 0 {
		t.Errorf("defaults %+v, %+v: want no App, no sign-in, a budget", d.GitHub, d.SignIn)
	}
	if err := os.Chmod(filepath.Join(dir, ghapp.CredentialsFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FromEnv(envOf(map[string]string{"WHILLY_DATA_DIR": dir})); !isConfigError(err, "chmod 600") {
		t.Errorf("a world-readable credentials file: %v, want it refused", err)
	}
}

// An issue's delivery job runs the planner agent: WHILLY_PLANNER_TIMEOUT for each of its
// two calls (the second when the first plan was invalid). River cuts a job at its time
// limit, so the limit must outlast both calls, whatever WHILLY_PLANNER_TIMEOUT says; a
// job cut short is retried and cut again, and the issue is never taken in.
func TestADeliveryJobOutlastsItsPlannerCalls(t *testing.T) {
	t.Parallel()
	pool := testkit.DB(t)
	for _, c := range []struct {
		env  map[string]string
		want time.Duration
	}{
		{map[string]string{"WHILLY_PLANNER": "sim", "WHILLY_PLANNER_TIMEOUT": "30m"}, 61 * time.Minute},
		{map[string]string{"WHILLY_PLANNER": "sim"}, 21 * time.Minute},
		{map[string]string{"WHILLY_PLANNER": "sim", "WHILLY_PLANNER_TIMEOUT": "2m"}, 5 * time.Minute},
		{map[string]string{}, time.Minute},
	} {
		c.env["WHILLY_GITHUB_TOKEN"] = "ghp_for_tests"
		cfg := configOf(t, c.env)
		cfg.GitHub.IntakeOnly = true
		srv, err := New(context.Background(), pool, discard, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := srv.GitHub().Intake.Worker().Timeout(nil); got != c.want {
			t.Errorf("with %v the delivery job's time limit is %v, want %v", c.env, got, c.want)
		}
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}
}
