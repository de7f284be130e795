//go:build linux

package e2e_test

import (
	"strconv"
	"testing"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/testkit"
)

// appRepo is the repository the App is installed on (installation 77) in appGitHub.
const appRepo = "Codertocat/Hello-World"

// spellingIssue is the body of appGitHub's issues: a task list of one task, which the
// intake plans without a planner.
const spellingIssue = "- [ ] Fix the spelling of commit in README.md\n\n## Acceptance criteria\n- README.md spells commit right\n\n## Test steps\n- grep -c commmit README.md\n"

// appGitHub is a fake GitHub with the App installed on appRepo, where Codertocat is an
// admin, and issues 1 to n labelled whilly-pending (not yet delivered).
func appGitHub(t *testing.T, n int) *testkit.GitHub {
	gh := testkit.NewGitHub(t)
	gh.Install(77, appRepo)
	gh.SetPermission(appRepo, "Codertocat", "admin")
	for i := 1; i <= n; i++ {
		gh.AddIssue(appRepo, i, "Spelling "+strconv.Itoa(i), spellingIssue, "Codertocat", ghapp.LabelPending)
	}
	return gh
}

// appEnv is the environment of a control plane that is the App on gh, with more. Every
// control plane of the test seals push tokens with the same key, as replicas must.
func appEnv(gh *testkit.GitHub, more ...string) []string {
	return append([]string{"WHILLY_GITHUB_APP_ID=" + strconv.FormatInt(gh.AppID, 10), "WHILLY_GITHUB_PRIVATE_KEY=" + string(gh.KeyPEM),
		"WHILLY_GITHUB_API_URL=" + gh.URL(), "WHILLY_TOKEN_SEAL_KEY=e2e-push-token-seal-key-of-32-bytes-or-more"}, more...)
}
