package app

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

//go:embed app.yml
var manifestYAML []byte

// ManifestYAML returns app.yml, the App manifest, as shipped.
func ManifestYAML() []byte { return slices.Clone(manifestYAML) }

// Manifest is the App manifest.
type Manifest struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	URL         string `json:"url"`
	Public      bool   `json:"public"`
	// RedirectURL is where GitHub sends the browser back with the code (the manifest
	// flow of `whilly app create`); empty in app.yml.
	RedirectURL string            `json:"redirect_url,omitempty"`
	HookURL     string            `json:"-"`
	HookActive  bool              `json:"-"`
	Permissions map[string]string `json:"default_permissions"`
	Events      []string          `json:"default_events"`
}

// LoadManifest reads the embedded app.yml.
func LoadManifest() (Manifest, error) { return parseManifest(manifestYAML) }

// autoEvent reports whether GitHub delivers the event to every App whatever it
// subscribes to; its manifest flow does not take those as default events.
func autoEvent(e string) bool { return e == "installation" || e == "installation_repositories" }

// FlowJSON returns the manifest as GitHub's manifest flow takes it, the webhook pointing
// at publicURL/webhook when publicURL is set.
func (m Manifest) FlowJSON(publicURL string) ([]byte, error) {
	hook := m.HookURL
	if publicURL != "" {
		hook = strings.TrimRight(publicURL, "/") + "/webhook"
	}
	var events []string
	for _, e := range m.Events {
		if !autoEvent(e) {
			events = append(events, e)
		}
	}
	// "Sign in with GitHub" sends the browser back to the control plane, at a callback
	// URL the App must list.
	var callbacks []string
	if publicURL != "" {
		callbacks = []string{strings.TrimRight(publicURL, "/") + OAuthCallbackPath}
	}
	out := struct {
		Manifest
		Hook      map[string]any `json:"hook_attributes"`
		Events    []string       `json:"default_events"`
		Callbacks []string       `json:"callback_urls,omitempty"`
	}{m, map[string]any{"url": hook, "active": m.HookActive}, events, callbacks}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// parseManifest reads the small YAML subset app.yml is written in: top-level scalars,
// and one level of nested maps or lists indented by two spaces. Full-line comments are
// skipped. It is not a YAML parser and need not be one: app.yml is ours.
func parseManifest(data []byte) (Manifest, error) {
	m := Manifest{Permissions: map[string]string{}}
	section := ""
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		nested := strings.HasPrefix(line, "  ")
		if !nested {
			key, val, ok := strings.Cut(trimmed, ":")
			if !ok {
				return m, fmt.Errorf("app.yml line %d: expected key: value", i+1)
			}
			val = unquote(strings.TrimSpace(val))
			section = ""
			switch key {
			case "name":
				m.Name = val
			case "description":
				m.Description = val
			case "url":
				m.URL = val
			case "public":
				m.Public = val == "true"
			case "hook_attributes", "default_permissions", "default_events":
				if val != "" {
					return m, fmt.Errorf("app.yml line %d: %s takes nested lines", i+1, key)
				}
				section = key
			default:
				return m, fmt.Errorf("app.yml line %d: unknown key %q", i+1, key)
			}
			continue
		}
		if section == "default_events" {
			item, ok := strings.CutPrefix(trimmed, "- ")
			if !ok {
				return m, fmt.Errorf("app.yml line %d: expected - event", i+1)
			}
			m.Events = append(m.Events, unquote(strings.TrimSpace(item)))
			continue
		}
		key, val, ok := strings.Cut(trimmed, ":")
		if !ok || section == "" {
			return m, fmt.Errorf("app.yml line %d: unexpected nested line", i+1)
		}
		key, val = strings.TrimSpace(key), unquote(strings.TrimSpace(val))
		switch section {
		case "hook_attributes":
			switch key {
			case "url":
				m.HookURL = val
			case "active":
				m.HookActive = val == "true"
			}
		case "default_permissions":
			m.Permissions[key] = val
		}
	}
	if m.Name == "" || len(m.Events) == 0 || len(m.Permissions) == 0 {
		return m, fmt.Errorf("app.yml needs name, default_permissions and default_events")
	}
	return m, nil
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}
