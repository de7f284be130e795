// Package logging builds whilly's one logger from WHILLY_LOG_LEVEL and WHILLY_LOG_FORMAT
// (internal/config), and demotes a library's routine INFO lines (River's) to DEBUG. It
// imports only the standard library and internal/config, so whilly-worker uses it too.
package logging

import (
	"context"
	"io"
	"log/slog"

	"github.com/whilly-go/whilly/internal/config"
)

// New returns the logger writing to w at WHILLY_LOG_LEVEL (def when unset) in
// WHILLY_LOG_FORMAT. A bad value is a configuration error, reported by env.Check too.
func New(w io.Writer, env *config.Env, def slog.Level) (*slog.Logger, error) {
	if err := env.Err(config.LogLevel); err != nil {
		return nil, err
	}
	if err := env.Err(config.LogFormat); err != nil {
		return nil, err
	}
	level := def
	if s := env.Raw(config.LogLevel); s != "" {
		if err := level.UnmarshalText([]byte(s)); err != nil {
			return nil, err // unreachable: the table allows only slog's level names
		}
	}
	opts := &slog.HandlerOptions{Level: level}
	if env.String(config.LogFormat) == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// Demote returns l with its INFO records logged at DEBUG: for a library whose INFO lines
// (River's "producer started", "elected leader" …) are routine to whilly's operator.
// WARN and ERROR are untouched.
func Demote(l *slog.Logger) *slog.Logger {
	return slog.New(demoted{l.Handler()})
}

type demoted struct{ h slog.Handler }

func demote(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

func (d demoted) Enabled(ctx context.Context, l slog.Level) bool {
	return d.h.Enabled(ctx, demote(l))
}

func (d demoted) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return d.h.Handle(ctx, r)
}

func (d demoted) WithAttrs(as []slog.Attr) slog.Handler { return demoted{d.h.WithAttrs(as)} }
func (d demoted) WithGroup(name string) slog.Handler    { return demoted{d.h.WithGroup(name)} }
