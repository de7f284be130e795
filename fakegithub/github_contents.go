package fakegithub

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Files of a repository the contents API serves (SetFile), and the App's installation
// listings. The files are apart from the git repository AddGitRepo serves: they are what
// the API's default branch shows.

func (g *GitHub) contentRoutes() []fakeRoute {
	rt := func(method, pattern string, auth authKind, h func(http.ResponseWriter, *http.Request, int64, []string) int) fakeRoute {
		return fakeRoute{method: method, re: regexp.MustCompile("^" + pattern + "$"), auth: auth, h: h}
	}
	return []fakeRoute{
		rt("GET", `/app/installations`, authApp, g.listInstallations),
		rt("GET", `/installation/repositories`, authToken, g.listInstallationRepos),
		rt("GET", repoRe+`/contents/?(.*)`, authToken, g.getContents),
	}
}

// SetFile puts a file at path (no leading slash) of repo's default branch, as the
// contents API reads it; "" as content removes it.
func (g *GitHub) SetFile(repo, path, content string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.repo(repo)
	if r.files == nil {
		r.files = map[string]string{}
	}
	path = strings.Trim(path, "/")
	if content == "" {
		delete(r.files, path)
		return
	}
	r.files[path] = content
}

// page reads per_page (default 30, at most 100) and page (from 1) as GitHub does, sets
// the Link header to the next page when there is one, and returns the slice bounds.
func (g *GitHub) page(w http.ResponseWriter, req *http.Request, n int) (start, end int) {
	per, _ := strconv.Atoi(req.URL.Query().Get("per_page"))
	if per <= 0 {
		per = 30
	}
	per = min(per, 100)
	p, _ := strconv.Atoi(req.URL.Query().Get("page"))
	p = max(p, 1)
	start = min((p-1)*per, n)
	end = min(start+per, n)
	if end < n {
		next := *req.URL
		q := next.Query()
		q.Set("page", strconv.Itoa(p+1))
		next.RawQuery = q.Encode()
		w.Header().Set("Link", fmt.Sprintf(`<%s%s>; rel="next"`, g.Server.URL, next.RequestURI()))
	}
	return start, end
}

// listInstallations is GET /app/installations: the App's installations, oldest first.
func (g *GitHub) listInstallations(w http.ResponseWriter, req *http.Request, _ int64, _ []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	ids := make([]int64, 0, len(g.installations))
	for id := range g.installations {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	start, end := g.page(w, req, len(ids))
	out := []map[string]any{}
	for _, id := range ids[start:end] {
		account := ""
		if repos := g.installations[id]; len(repos) > 0 {
			account, _, _ = strings.Cut(repos[0], "/")
		}
		out = append(out, map[string]any{"id": id, "app_id": g.AppID, "target_type": "Organization",
			"account": map[string]any{"login": account}, "repository_selection": "selected"})
	}
	return writeJSON(w, http.StatusOK, out)
}

// installationRepos returns the installation's repositories, sorted by name; an
// installation with no list covers every repository the fake knows.
func (g *GitHub) installationRepos(inst int64) []*fakeRepo {
	var out []*fakeRepo
	names, all := g.installations[inst], g.installations[inst] == nil
	for k, r := range g.repos {
		if all || slices.Contains(names, k) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *fakeRepo) int { return strings.Compare(strings.ToLower(a.name), strings.ToLower(b.name)) })
	return out
}

// listInstallationRepos is GET /installation/repositories with an installation's token.
func (g *GitHub) listInstallationRepos(w http.ResponseWriter, req *http.Request, inst int64, _ []string) int {
	if inst == 0 {
		return writeJSON(w, http.StatusForbidden, map[string]string{"message": "You must authenticate with an installation access token in order to list repositories for an installation."})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	repos := g.installationRepos(inst)
	start, end := g.page(w, req, len(repos))
	list := []map[string]any{}
	for _, r := range repos[start:end] {
		owner, name, _ := strings.Cut(r.name, "/")
		list = append(list, map[string]any{"name": name, "full_name": r.name, "private": true,
			"owner": map[string]any{"login": owner}, "default_branch": r.defaultBranch})
	}
	return writeJSON(w, http.StatusOK, map[string]any{"total_count": len(repos), "repositories": list})
}

// getContents is GET /repos/OWNER/NAME/contents/PATH: a file (its content in base64,
// wrapped at 60 characters as GitHub does) or a directory's entries; 404 for neither.
func (g *GitHub) getContents(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.repoFor(inst, m)
	if !ok {
		return notFound(w)
	}
	path := strings.Trim(m[3], "/")
	if content, ok := r.files[path]; ok {
		enc := base64.StdEncoding.EncodeToString([]byte(content))
		var wrapped strings.Builder
		for len(enc) > 60 {
			wrapped.WriteString(enc[:60] + "\n")
			enc = enc[60:]
		}
		wrapped.WriteString(enc + "\n")
		out := contentEntry(r, path, "file", len(content))
		out["content"], out["encoding"] = wrapped.String(), "base64"
		return writeJSON(w, http.StatusOK, out)
	}
	entries := map[string]map[string]any{}
	prefix := path + "/"
	if path == "" {
		prefix = ""
	}
	for p, content := range r.files {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		if dir, _, nested := strings.Cut(rest, "/"); nested {
			entries[dir] = contentEntry(r, prefix+dir, "dir", 0)
		} else {
			entries[rest] = contentEntry(r, p, "file", len(content))
		}
	}
	if len(entries) == 0 {
		return notFound(w)
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]map[string]any, 0, len(names))
	for _, n := range names {
		out = append(out, entries[n])
	}
	return writeJSON(w, http.StatusOK, out)
}

func contentEntry(r *fakeRepo, path, typ string, size int) map[string]any {
	name := path[strings.LastIndex(path, "/")+1:]
	return map[string]any{"type": typ, "name": name, "path": path, "size": size,
		"sha": fmt.Sprintf("%040x", len(path)*7919+size), "url": fmt.Sprintf("https://api.github.com/repos/%s/contents/%s", r.name, path),
		"html_url": fmt.Sprintf("https://github.com/%s/blob/%s/%s", r.name, r.defaultBranch, path)}
}
