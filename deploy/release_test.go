package deploy_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// workflow is the part of a GitHub Actions workflow the release test reads.
type workflow struct {
	// YAML 1.1, which the converter reads, takes the key `on` for true.
	On   map[string]map[string][]string `json:"true"`
	Jobs map[string]struct {
		Strategy struct {
			Matrix map[string][]string `json:"matrix"`
		} `json:"strategy"`
		Steps []struct {
			Uses string            `json:"uses"`
			Run  string            `json:"run"`
			With map[string]string `json:"with"`
		} `json:"steps"`
	} `json:"jobs"`
}

// The release workflow publishes what the chart and the Action expect: the images the
// chart's values name, tagged with the chart's appVersion (the tag without its v), for
// amd64 and arm64 with provenance; the chart with that appVersion; the tarballs named as
// `make release` names them. actionlint (in .ci/run) checks the workflow's syntax.
func TestReleaseWorkflowPublishesWhatTheChartNames(t *testing.T) {
	t.Parallel()
	var w workflow
	if err := yaml.Unmarshal([]byte(repoFile(t, ".github/workflows/release.yml")), &w); err != nil {
		t.Fatalf("release.yml: %v", err)
	}
	if tags := w.On["push"]["tags"]; !slices.Equal(tags, []string{"v*"}) {
		t.Errorf("release.yml runs on tags %v, want [v*]", tags)
	}
	// Every action pinned to a version tag or a commit.
	pinned := regexp.MustCompile(`^[\w.-]+/[\w./-]+@(v\d+(\.\d+)*|[0-9a-f]{40})$`)
	runs := map[string]string{}
	for name, job := range w.Jobs {
		for _, s := range job.Steps {
			if s.Uses != "" && !pinned.MatchString(s.Uses) {
				t.Errorf("job %s uses %s: pin it to a version tag or a commit", name, s.Uses)
			}
			runs[name] += s.Run + "\n"
		}
	}

	// The repository's owner is the module path's (github.com/OWNER/whilly).
	m := regexp.MustCompile(`(?m)^module github\.com/([\w-]+)/whilly$`).FindStringSubmatch(repoFile(t, "go.mod"))
	if m == nil {
		t.Fatal("go.mod: no module github.com/OWNER/whilly")
	}
	owner := m[1]
	type image struct{ Repository, Tag string }
	var values struct {
		Image struct{ Serve, Worker image } `json:"image"`
	}
	if err := yaml.Unmarshal([]byte(repoFile(t, "deploy/helm/whilly/values.yaml")), &values); err != nil {
		t.Fatal(err)
	}

	images := w.Jobs["images"]
	if got := images.Strategy.Matrix["image"]; !slices.Equal(got, []string{"serve", "worker"}) {
		t.Errorf("images matrix = %v, want [serve worker]", got)
	}
	for name, v := range map[string]image{"serve": values.Image.Serve, "worker": values.Image.Worker} {
		if want := "ghcr.io/" + owner + "/whilly-" + name; v.Repository != want || v.Tag != "" {
			t.Errorf("values image.%s = %s:%q, want %s with the appVersion as tag", name, v.Repository, v.Tag, want)
		}
	}
	meta := runs["images"]
	for _, want := range []string{`owner="${GITHUB_REPOSITORY_OWNER,,}"`, `version="${GITHUB_REF_NAME#v}"`,
		"ghcr.io/$owner/whilly-${{ matrix.image }}:$version"} {
		if !strings.Contains(meta, want) {
			t.Errorf("the images job does not compute %s", want)
		}
	}
	var push map[string]string
	for _, s := range images.Steps {
		if strings.HasPrefix(s.Uses, "docker/build-push-action@") {
			push = s.With
		}
	}
	if push == nil {
		t.Fatal("the images job has no docker/build-push-action step")
	}
	if push["file"] != "deploy/docker/${{ matrix.image }}.Dockerfile" || push["push"] != "true" ||
		push["platforms"] != "linux/amd64,linux/arm64" || push["sbom"] != "true" ||
		!strings.HasPrefix(push["provenance"], "mode=") {
		t.Errorf("build-push-action with = %v: want each Dockerfile for linux/amd64,linux/arm64, pushed, with provenance and SBOM", push)
	}
	for _, arg := range []string{"VERSION=", "COMMIT=", "DATE="} {
		if !strings.Contains(push["build-args"], arg) {
			t.Errorf("the images are not stamped with %s (build-args %q)", arg, push["build-args"])
		}
	}

	chart := runs["chart"]
	for _, want := range []string{`--version "$version" --app-version "$version"`, `oci://ghcr.io/$owner/charts`} {
		if !strings.Contains(chart, want) {
			t.Errorf("the chart job does not run %s", want)
		}
	}
	// The Action downloads whilly_<tag>_<os>_<arch>.tar.gz and SHA256SUMS.
	if !strings.Contains(runs["binaries"], `make release VERSION="$GITHUB_REF_NAME"`) ||
		!strings.Contains(repoFile(t, "Makefile"), "name=whilly_$(VERSION)_$${os}_$${arch}") {
		t.Error("the binaries are not made by `make release VERSION=<tag>` as whilly_<tag>_<os>_<arch>")
	}
	if rel := runs["release"]; !strings.Contains(rel, "./*.tar.gz SHA256SUMS") {
		t.Errorf("the release job does not publish the tarballs and SHA256SUMS:\n%s", rel)
	}
}
