package cli

import (
	"errors"

	"github.com/whilly-go/whilly/server"
)

// readGitHubEnv reads the GitHub side's configuration (server.GitHubFromEnv). hasApp
// reports whether the App is configured (WHILLY_GITHUB_APP_ID set, else the file of
// `whilly app create` in WHILLY_DATA_DIR); when it is, its private key must be there too.
func (a *app) readGitHubEnv() (env server.GitHub, hasApp bool, err error) {
	env, err = server.GitHubFromEnv(a.cfg)
	if err != nil {
		return env, false, serverErr(err)
	}
	return env, env.HasApp(), nil
}

// errNoGitHub is returned by commands that need GitHub when nothing is configured.
var errNoGitHub = errors.New("GitHub is not configured: set WHILLY_GITHUB_APP_ID and WHILLY_GITHUB_PRIVATE_KEY (or _FILE) for the App, or WHILLY_GITHUB_TOKEN")
