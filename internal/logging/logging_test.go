package logging_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/internal/logging"
)

func newLogger(t *testing.T, env map[string]string, def slog.Level) (*slog.Logger, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	l, err := logging.New(&buf, config.New(func(k string) string { return env[k] }), def)
	if err != nil {
		t.Fatal(err)
	}
	return l, &buf
}

func TestLevelAndFormat(t *testing.T) {
	t.Parallel()
	l, buf := newLogger(t, map[string]string{"WHILLY_LOG_LEVEL": "warn", "WHILLY_LOG_FORMAT": "json"}, slog.LevelDebug)
	l.Info("hidden")
	l.Warn("shown", "plan_id", "p1")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON object: %q", buf.String())
	}
	if rec["msg"] != "shown" || rec["level"] != "WARN" || rec["plan_id"] != "p1" {
		t.Errorf("record = %v", rec)
	}

	l, buf = newLogger(t, nil, slog.LevelInfo) // defaults: the caller's level, text
	l.Debug("hidden")
	l.Info("shown", "k", "v")
	if got := buf.String(); !strings.Contains(got, "level=INFO msg=shown k=v") || strings.Contains(got, "hidden") {
		t.Errorf("text log = %q", got)
	}
}

func TestBadValuesAreConfigErrors(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{{"WHILLY_LOG_LEVEL": "verbose"}, {"WHILLY_LOG_FORMAT": "xml"}} {
		if _, err := logging.New(&bytes.Buffer{}, config.New(func(k string) string { return env[k] }), slog.LevelInfo); err == nil {
			t.Errorf("%v accepted", env)
		}
	}
}

func TestDemoteMakesInfoDebug(t *testing.T) {
	t.Parallel()
	l, buf := newLogger(t, map[string]string{"WHILLY_LOG_LEVEL": "info"}, slog.LevelInfo)
	d := logging.Demote(l).With("component", "river")
	d.Info("River client started")
	d.Warn("job failed")
	got := buf.String()
	if strings.Contains(got, "River client started") || !strings.Contains(got, "level=WARN msg=\"job failed\" component=river") {
		t.Errorf("at info: %q", got)
	}

	l, buf = newLogger(t, map[string]string{"WHILLY_LOG_LEVEL": "debug"}, slog.LevelInfo)
	logging.Demote(l).WithGroup("g").Info("River client started", "id", 1)
	if got := buf.String(); !strings.Contains(got, `level=DEBUG msg="River client started" g.id=1`) {
		t.Errorf("at debug: %q", got)
	}
}
