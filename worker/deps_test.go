package worker_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The slim worker binary: its import graph holds no database driver, River,
// router, GitHub App code or store, workspaces and diff gate included.
func TestWorkerBinaryStaysSlim(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "../cmd/whilly-worker").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/jackc/pgx", "github.com/riverqueue/river", "github.com/go-chi/chi",
			"github.com/bradleyfalzon/ghinstallation", "github.com/google/go-github", "github.com/whilly-go/whilly/queue"} {
			if pkg == banned || strings.HasPrefix(pkg, banned+"/") {
				t.Errorf("whilly-worker depends on %s", pkg)
			}
		}
	}
}
