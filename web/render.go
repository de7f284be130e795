package web

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// layout is the frame of every page; partials are the fragments live updates re-render.
const (
	layoutFile   = "templates/layout.html"
	partialsFile = "templates/partials.html"
)

// parsePages parses each page of templates/ together with the layout and the partials,
// plus "partials" alone for the live fragments.
func parsePages() (map[string]*template.Template, error) {
	base, err := template.New("").Funcs(funcs).ParseFS(templateFiles, layoutFile, partialsFile)
	if err != nil {
		return nil, fmt.Errorf("parse dashboard templates: %w", err)
	}
	files, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("list dashboard templates: %w", err)
	}
	pages := map[string]*template.Template{"partials": base}
	for _, f := range files {
		if f == layoutFile || f == partialsFile {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFiles, f)
		if err != nil {
			return nil, fmt.Errorf("parse dashboard template %s: %w", f, err)
		}
		pages[strings.TrimSuffix(path.Base(f), ".html")] = t
	}
	return pages, nil
}

var funcs = template.FuncMap{
	"planURL":    PlanPath,
	"attemptURL": AttemptPath,
	"taskAnchor": func(id string) string { return "task-" + id },
	"money":      func(u plan.USD) string { return "$" + u.String() },
	"budget": func(b *plan.USD) string {
		if b == nil {
			return "no cap"
		}
		return "$" + b.String()
	},
	"lower": func(v any) string { return strings.ToLower(fmt.Sprint(v)) },
	"ago":   ago,
	"when":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"seq": func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = i + 1
		}
		return out
	},
	"depth": func(d int) string { return fmt.Sprintf("d%d", min(d, 8)) },
	"short": func(s string, n int) string {
		if len([]rune(s)) <= n {
			return s
		}
		return string([]rune(s)[:n]) + "…"
	},
}

// PlanPath is the dashboard page of a plan: the links in status comments and pull
// requests lead there (app.dashboardURL builds the same path; /?plan=ID redirects).
func PlanPath(planID string) string { return "/plans/" + url.PathEscape(planID) }

// AttemptPath is the page of a task's attempt n (its agent log).
func AttemptPath(planID, taskID string, n int) string {
	return fmt.Sprintf("/plans/%s/tasks/%s/attempts/%d", url.PathEscape(planID), url.PathEscape(taskID), n)
}

func ago(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "never"
	}
	d := time.Since(*t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// frame is what the layout shows around a page.
type frame struct {
	Title  string
	Nav    string // plans, workers, events
	Who    string
	Admin  bool
	CSRF   string
	Stream string // the event stream this page follows ("" none)
	Live   string // where it fetches fresh fragments
	Page   any
}

func (h *Handler) frameFor(r *http.Request, title, nav string, page any) frame {
	f := frame{Title: title, Nav: nav, Page: page}
	if s, ok := SessionFrom(r.Context()); ok {
		f.Who, f.Admin, f.CSRF = s.Principal.Name, s.Principal.Admin, s.CSRF
	}
	return f
}

// render writes page name with data; a template error is a 500 with a plain message.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	t, ok := h.pages[name]
	if !ok {
		h.serverError(w, r, fmt.Errorf("no dashboard page %q", name))
		return
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, "layout", data); err != nil {
		h.serverError(w, r, fmt.Errorf("render dashboard page %s: %w", name, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = b.WriteTo(w)
}

// fragment renders one partial to a string.
func (h *Handler) fragment(name string, data any) (string, error) {
	var b strings.Builder
	if err := h.pages["partials"].ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("render fragment %s: %w", name, err)
	}
	return b.String(), nil
}

type failView struct {
	Status  int
	Message string
}

// fail answers a page with status and one sentence saying what to do.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	f := h.frameFor(r, http.StatusText(status), "", failView{Status: status, Message: msg})
	h.render(w, r, status, "error", f)
}

// serverError logs err and answers 500 without its text.
func (h *Handler) serverError(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := http.StatusInternalServerError, "Something went wrong on the server; try again, and see its log if it persists."
	if queue.IsUnavailable(err) {
		status, msg = http.StatusServiceUnavailable, "The database is unavailable; try again in a moment."
		w.Header().Set("Retry-After", "5")
	}
	h.log.ErrorContext(r.Context(), "dashboard request failed", "path", r.URL.Path, "error", err)
	h.fail(w, r, status, msg)
}
