// Package version says which build of whilly is running: version, commit, build date and
// Go version. Release builds set them with -ldflags -X (see `make release`); a build made
// with `go install` or `go build` falls back to what the Go toolchain stamped into the
// binary (module version, VCS revision and time). Both binaries use it, so it imports the
// standard library only.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by the linker (-ldflags "-X github.com/whilly-go/whilly/internal/version.version=…").
// These are the one package-level variables of whilly: -X can only write package-level
// strings. Nothing assigns them at run time.
var (
	version = ""
	commit  = ""
	date    = ""
)

// Info describes a build.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Get returns the running binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, date, bi)
}

// resolve prefers the linker's values and fills the rest from the toolchain's stamp.
func resolve(ldVersion, ldCommit, ldDate string, bi *debug.BuildInfo) Info {
	in := Info{
		Version:   ldVersion,
		Commit:    ldCommit,
		Date:      ldDate,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.time":
				if in.Date == "" {
					in.Date = s.Value
				}
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if dirty && ldCommit == "" && in.Commit != "" {
			in.Commit += "-dirty"
		}
	}
	if in.Version == "" {
		in.Version = "dev"
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	if in.Date == "" {
		in.Date = "unknown"
	}
	return in
}

// Text is what `whilly version` and `--version` print for program:
//
//	whilly v0.1.0
//	commit  1a2b3c4d5e6f
//	built   2026-12-01T12:00:00Z
//	go      go1.26.8 linux/amd64
//
// A build without the linker's values or Go's VCS stamp (go build -buildvcs=false, as
// GOFLAGS may say, or a build outside a git clone) says on its commit line how to get one.
func (in Info) Text(program string) string {
	commit := shortCommit(in.Commit)
	if in.Commit == "unknown" {
		commit += " (this build has no VCS stamp: build with 'make build', or with 'go build -buildvcs=true' in a git clone)"
	}
	return fmt.Sprintf("%s %s\ncommit  %s\nbuilt   %s\ngo      %s %s\n",
		program, in.Version, commit, in.Date, in.GoVersion, in.Platform)
}

// shortCommit keeps the first 12 characters of a full hash (and a -dirty suffix).
func shortCommit(c string) string {
	hash, suffix, _ := strings.Cut(c, "-")
	if len(hash) == 40 {
		hash = hash[:12]
	}
	if suffix != "" {
		return hash + "-" + suffix
	}
	return hash
}
