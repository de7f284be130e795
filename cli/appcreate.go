package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/server"
)

// appCreateTimeout bounds the wait for the browser to come back from GitHub.
const appCreateTimeout = 30 * time.Minute

func (a *app) appCreate() *cobra.Command {
	var (
		org       string
		noBrowser bool
	)
	cmd := &cobra.Command{
		Use:   "create [--org ORG]",
		Short: "Create whilly's GitHub App on GitHub and save its id, key and secrets",
		Long: `Create whilly's GitHub App with GitHub's manifest flow, in one click.

whilly serves a page on 127.0.0.1 (a random port) and opens it in your browser: the page
posts whilly's manifest (the permissions and events of 'whilly app manifest', the webhook
URL WHILLY_PUBLIC_URL/webhook, or a placeholder when it is unset) to GitHub's "new App"
page, for your account or, with --org, for an organization you administer. You choose the
App's name there and click "Create"; GitHub sends the browser back to whilly, which
exchanges the code for the App's id, slug, private key, webhook secret and OAuth client
id and secret, writes them to WHILLY_DATA_DIR/github-app.json (mode 0600), and prints the
link to install the App.

'whilly serve' reads that file when WHILLY_GITHUB_APP_ID is unset (and takes its webhook
secret when WHILLY_GITHUB_WEBHOOK_SECRET is unset). Without a public URL, run serve with
WHILLY_GITHUB_DELIVERIES=pull. An existing file is never replaced. WHILLY_GITHUB_API_URL
points at GitHub Enterprise Server (the new-App page is on its web host).`,
		Example: `  whilly app create --org my-org`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runAppCreate(cmd.Context(), org, !noBrowser)
		},
	}
	cmd.Flags().StringVar(&org, "org", "", "create the App for this organization (default: your account)")
	cmd.Flags().BoolVar(&noBrowser, "no-browser", false, "print the page's address instead of opening a browser")
	return cmd
}

func (a *app) credentialsPath() string { return server.CredentialsPath(a.cfg) }

func (a *app) runAppCreate(ctx context.Context, org string, openBrowser bool) error {
	if org != "" {
		if err := ghapp.CheckOrg(org); err != nil {
			return failf("--org: %w", err)
		}
	}
	path := a.credentialsPath()
	if _, err := os.Stat(path); err == nil {
		return failf("%s already exists (an App was created before): move it away to create another App", path)
	}
	m, err := ghapp.LoadManifest()
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return envf("listen on 127.0.0.1 for GitHub's redirect: %w", err)
	}
	host := ln.Addr().String()
	m.RedirectURL = "http://" + host + "/callback"
	manifest, err := m.FlowJSON(a.cfg.String(config.PublicURL))
	if err != nil {
		_ = ln.Close()
		return err
	}
	state := make([]byte, 16)
	_, _ = rand.Read(state)
	apiURL := a.cfg.Raw(config.GitHubAPIURL)
	newApp, err := ghapp.NewAppURL(apiURL, org, hex.EncodeToString(state))
	if err != nil {
		_ = ln.Close()
		return envf("WHILLY_GITHUB_API_URL: %w", err)
	}
	flow := ghapp.NewManifestFlow(ghapp.ManifestFlowConfig{
		Host: host, NewAppURL: newApp, State: hex.EncodeToString(state), Manifest: manifest,
		Complete: func(ctx context.Context, code string) (ghapp.Credentials, error) {
			return ghapp.CompleteManifest(ctx, apiURL, code)
		},
		Save: func(c ghapp.Credentials) error { return ghapp.WriteCredentials(path, c) },
	})
	srv := &http.Server{Handler: flow, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // ends with Shutdown below
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	page := "http://" + host + "/"
	a.printf("Open %s in your browser to create the GitHub App (waiting up to %s).\n", page, appCreateTimeout)
	if openBrowser {
		if err := startBrowser(ctx, page); err != nil {
			a.printf("Could not open a browser (%v): open the address yourself.\n", err)
		}
	}
	wait := time.NewTimer(appCreateTimeout)
	defer wait.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wait.C:
		return failf("no answer from GitHub within %s: run whilly app create again", appCreateTimeout)
	case res := <-flow.Done():
		if c := res.Credentials; res.Err != nil && c.AppID != 0 {
			return failf("GitHub created the App %s (id %d) but whilly could not save its credentials (%w): on the App's settings page (%s) generate a private key and a webhook secret and set WHILLY_GITHUB_APP_ID, WHILLY_GITHUB_PRIVATE_KEY_FILE and WHILLY_GITHUB_WEBHOOK_SECRET",
				c.Slug, c.AppID, res.Err, c.HTMLURL)
		}
		if res.Err != nil {
			// GitHub creates the App before it redirects with the code: the App exists.
			return failf("GitHub created the App, but whilly could not fetch its credentials (%w): finish it on %s (generate a private key, set its webhook secret, and set WHILLY_GITHUB_APP_ID, WHILLY_GITHUB_PRIVATE_KEY_FILE and WHILLY_GITHUB_WEBHOOK_SECRET), or delete it there and run whilly app create again",
				res.Err, appsSettingsURL(newApp))
		}
		c := res.Credentials
		a.printf("Created the GitHub App %s (id %d).\n", c.Slug, c.AppID)
		a.printf("Its id, private key, webhook secret and OAuth client are in %s (mode 0600).\n", path)
		a.printf("Install it on your repositories: %s\n", c.InstallURL())
		return nil
	}
}

// appsSettingsURL is the page listing the Apps of the user or organization whose
// new-App page is newApp (…/settings/apps/new?state=…).
func appsSettingsURL(newApp string) string {
	u, err := url.Parse(newApp)
	if err != nil {
		return "your GitHub settings (Developer settings, GitHub Apps)"
	}
	u.Path, u.RawQuery = strings.TrimSuffix(u.Path, "/new"), ""
	return u.String()
}

// startBrowser opens url in the desktop's browser, without waiting for it.
func startBrowser(ctx context.Context, url string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return errors.New(name + " is not installed")
	}
	cmd := exec.CommandContext(ctx, bin, url)
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }() // reap it
	return nil
}
