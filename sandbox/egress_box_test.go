package sandbox

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// boxRun runs sh -c script in a box made by s for environ and returns its output and
// the denials its proxy reported.
func boxRun(t *testing.T, s *Sandbox, script string, environ []string) (string, []Denial) {
	t.Helper()
	var mu sync.Mutex
	var denied []Denial
	c, err := s.Prepare(ctxT(t), Spec{Path: "/bin/sh", Args: []string{"-c", script}, Dir: t.TempDir(), Environ: environ,
		OnDenied: func(d Denial) { mu.Lock(); denied = append(denied, d); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	out, err := runCmd(t, c)
	c.Close() // waits for the proxy's handlers: every denial is in
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	return string(out), denied
}

// At its defaults, a box reaches the registry the worker's own npmrc names, and its npm
// is told to use it; a host nobody allowed is refused and reported.
func TestBoxReachesTheWorkersRegistry(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl here")
	}
	o := startTLSOrigin(t)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	home := t.TempDir()
	writeFiles(t, home, map[string]string{".npmrc": fmt.Sprintf("registry=https://localhost:%d/\n//localhost:%d/:_authToken=npm_SECRET\n", port, port)})
	environ := []string{"PATH=/usr/bin:/bin", "HOME=" + home}
	set, err := SettingsFromEnv(lookup(environ))
	if err != nil {
		t.Fatal(err)
	}
	s := boxT(t, set)
	out, denied := boxRun(t, s, fmt.Sprintf(`env | grep -c SECRET
curl -sk --max-time 10 "$npm_config_registry"; echo
curl -sk --max-time 10 -o /dev/null -w '%%{http_connect}\n' https://127.0.0.1:%d/ || true`, port), environ)
	if want := "0\nhello localhost\n403\n"; out != want {
		t.Errorf("the box printed\n%s\nwant\n%s", out, want)
	}
	if len(denied) != 1 || denied[0] != (Denial{Host: "127.0.0.1", Port: port}) {
		t.Errorf("denials: %+v", denied)
	}
}

// The real registries, with the real clients, through the box's proxy (its SNI check
// included): go mod download from the Go module proxy, checked against the checksum
// database, and npm view from the npm registry. Skipped where they cannot be reached.
func TestBoxReachesTheRealRegistries(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("reaches the network")
	}
	for _, h := range []string{"proxy.golang.org:443", "registry.npmjs.org:443"} {
		c, err := (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctxT(t), "tcp", h)
		if err != nil {
			t.Skipf("%s cannot be reached from here: %v", h, err)
		}
		_ = c.Close()
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go here")
	}
	npmBin, _ := exec.LookPath("npm")
	environ := []string{"PATH=" + strings.TrimSuffix(goBin, "/go") + ":/usr/bin:/bin", "HOME=" + t.TempDir()}
	set, err := SettingsFromEnv(lookup(environ))
	if err != nil {
		t.Fatal(err)
	}
	s := boxT(t, set)
	script := `export GOMODCACHE=/tmp/mod GOPATH=/tmp/gopath GOCACHE=/tmp/gocache GOTOOLCHAIN=local GOFLAGS=-modcacherw
cd /tmp && go mod download -json rsc.io/quote@v1.5.2 | grep -o '"Sum": "h1:[^"]*"'`
	want := `"Sum": "h1:w5fcysjrx7yqtD/aO+QwRjYZOKnaM9Uh2b40tElTs3Y="` + "\n"
	if npmBin != "" {
		script += "\nnpm view is-number@7.0.0 version --cache /tmp/npm --no-update-notifier"
		want += "7.0.0\n"
	}
	if out, denied := boxRun(t, s, script, environ); out != want || len(denied) != 0 {
		t.Errorf("the box printed\n%s\nwant\n%s\ndenials %+v", out, want, denied)
	}
}
