package control_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/internal/version"
)

func TestBuildInfoMetric(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	status, body := e.do("GET", "/metrics", "", nil)
	if status != 200 {
		t.Fatalf("/metrics: %d %s", status, body)
	}
	in := version.Get()
	want := fmt.Sprintf(`whilly_build_info{commit=%q,date=%q,goversion=%q,version=%q} 1`, in.Commit, in.Date, in.GoVersion, in.Version)
	if !strings.Contains(body, want+"\n") {
		t.Errorf("/metrics lacks %s", want)
	}
}
