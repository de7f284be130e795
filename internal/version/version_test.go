package version

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	const rev = "7f844ef99e564d61577b1b426de0ac22a75f5aa2"
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/whilly-go/whilly", Version: "v0.3.1"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-11-29T23:37:06Z"},
			{Key: "vcs.modified", Value: "false"},
		},
	}
	dirty := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/whilly-go/whilly", Version: "(devel)"},
		Settings:  []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}},
	}
	tests := []struct {
		name                string
		ldV, ldC, ldD       string
		bi                  *debug.BuildInfo
		wantV, wantC, wantD string
	}{
		{"linker values win", "v1.0.0", "abc", "2026-12-01T00:00:00Z", stamped, "v1.0.0", "abc", "2026-12-01T00:00:00Z"},
		{"go install: module version and vcs stamp", "", "", "", stamped, "v0.3.1", rev, "2026-11-29T23:37:06Z"},
		{"local build of a modified tree", "", "", "", dirty, "dev", rev + "-dirty", "unknown"},
		{"no build info at all", "", "", "", nil, "dev", "unknown", "unknown"},
		{"linker version, stamp for the rest", "v2.0.0", "", "", stamped, "v2.0.0", rev, "2026-11-29T23:37:06Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := resolve(tt.ldV, tt.ldC, tt.ldD, tt.bi)
			if got.Version != tt.wantV || got.Commit != tt.wantC || got.Date != tt.wantD {
				t.Errorf("resolve = %+v, want version %q commit %q date %q", got, tt.wantV, tt.wantC, tt.wantD)
			}
			if got.GoVersion == "" || got.Platform != runtime.GOOS+"/"+runtime.GOARCH {
				t.Errorf("go version %q platform %q", got.GoVersion, got.Platform)
			}
		})
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	in := Info{Version: "v0.1.0", Commit: "7f844ef99e564d61577b1b426de0ac22a75f5aa2-dirty", Date: "2026-12-01T15:20:00Z",
		GoVersion: "go1.26.8", Platform: "linux/amd64"}
	want := "whilly v0.1.0\ncommit  7f844ef99e56-dirty\nbuilt   2026-12-01T15:20:00Z\ngo      go1.26.8 linux/amd64\n"
	if got := in.Text("whilly"); got != want {
		t.Errorf("Text =\n%s\nwant\n%s", got, want)
	}
}

// TestReleaseStamp builds whilly-worker with the Makefile's own -ldflags and checks that
// the binary reports what was stamped: a renamed package or variable would otherwise
// leave every release saying "dev".
func TestReleaseStamp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ldflags, err := exec.CommandContext(t.Context(), "make", "-s", "--no-print-directory", "-C", root, "print-ldflags",
		"VERSION=v9.8.7-test", "COMMIT=0123456789abcdef0123456789abcdef01234567", "DATE=2026-01-02T03:04:05Z").Output()
	if err != nil {
		t.Fatalf("make print-ldflags: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "whilly-worker")
	build := exec.CommandContext(t.Context(), "go", "build", "-ldflags", strings.TrimSpace(string(ldflags)), "-o", bin, "./cmd/whilly-worker")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want := "whilly-worker v9.8.7-test\ncommit  0123456789ab\nbuilt   2026-01-02T03:04:05Z\ngo      " +
		runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, arg := range []string{"--version", "version"} {
		out, err := exec.CommandContext(t.Context(), bin, arg).Output()
		if err != nil {
			t.Fatalf("whilly-worker %s: %v", arg, err)
		}
		if string(out) != want {
			t.Errorf("whilly-worker %s =\n%s\nwant\n%s", arg, out, want)
		}
	}
}

// A build that carries neither the linker's values nor Go's VCS stamp (go build with
// -buildvcs=false, GOFLAGS set so, or outside a git clone) says how to get the commit
// instead of a bare "unknown".
func TestTextOfAnUnstampedBuild(t *testing.T) {
	t.Parallel()
	in := resolve("", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}})
	lines := strings.Split(in.Text("whilly"), "\n")
	const want = "commit  unknown (this build has no VCS stamp: build with 'make build', or with 'go build -buildvcs=true' in a git clone)"
	if len(lines) != 5 || lines[1] != want {
		t.Errorf("Text =\n%s\nwant its commit line %q", in.Text("whilly"), want)
	}
	if in.Commit != "unknown" {
		t.Errorf("Commit = %q, want unknown (what --json says)", in.Commit)
	}
}
