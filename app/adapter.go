package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"
)

// ghClient is Client over go-github. graphQL is the GraphQL endpoint, reached through
// the same authenticated transport.
type ghClient struct {
	gh      *github.Client
	graphQL string
}

func (c *ghClient) Issue(ctx context.Context, ref IssueRef) (Issue, error) {
	is, resp, err := c.gh.Issues.Get(ctx, ref.Owner, ref.Name, ref.Number)
	if err != nil {
		return Issue{}, mapErr("get issue "+ref.String(), resp, err)
	}
	out := Issue{
		Number: is.GetNumber(), Title: is.GetTitle(), Body: is.GetBody(), State: is.GetState(),
		Author: is.GetUser().GetLogin(), URL: is.GetHTMLURL(),
	}
	for _, l := range is.Labels {
		out.Labels = append(out.Labels, l.GetName())
	}
	return out, nil
}

func (c *ghClient) React(ctx context.Context, ref IssueRef, content string) error {
	_, resp, err := c.gh.Reactions.CreateIssueReaction(ctx, ref.Owner, ref.Name, ref.Number, content)
	return mapErr("react to "+ref.String(), resp, err)
}

func (c *ghClient) ReactToComment(ctx context.Context, repo Repo, id int64, content string) error {
	_, resp, err := c.gh.Reactions.CreateIssueCommentReaction(ctx, repo.Owner, repo.Name, id, content)
	return mapErr(fmt.Sprintf("react to comment %d in %s", id, repo), resp, err)
}

func (c *ghClient) Permission(ctx context.Context, repo Repo, user string) (string, error) {
	p, resp, err := c.gh.Repositories.GetPermissionLevel(ctx, repo.Owner, repo.Name, user)
	if err != nil {
		err = mapErr(fmt.Sprintf("read permission of %s on %s", user, repo), resp, err)
		if errors.Is(err, ErrNotFound) {
			return PermissionNone, nil
		}
		return "", err
	}
	return p.GetPermission(), nil
}

func (c *ghClient) IssueLabels(ctx context.Context, ref IssueRef) ([]string, error) {
	var out []string
	opts := &github.ListOptions{PerPage: 100}
	for page := 0; page < 10; page++ {
		ls, resp, err := c.gh.Issues.ListLabelsByIssue(ctx, ref.Owner, ref.Name, ref.Number, opts)
		if err != nil {
			return nil, mapErr("list labels of "+ref.String(), resp, err)
		}
		for _, l := range ls {
			out = append(out, l.GetName())
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	return out, nil
}

func (c *ghClient) AddLabels(ctx context.Context, ref IssueRef, names ...string) error {
	// The body is the object GitHub's API description declares, {"labels": [...]}:
	// go-github's AddLabelsToIssue sends a bare array, which it does not.
	u := fmt.Sprintf("repos/%s/%s/issues/%d/labels", ref.Owner, ref.Name, ref.Number)
	req, err := c.gh.NewRequest(http.MethodPost, u, map[string][]string{"labels": names})
	if err != nil {
		return fmt.Errorf("label %s: %w", ref, err)
	}
	resp, err := c.gh.Do(ctx, req, nil)
	return mapErr("label "+ref.String(), resp, err)
}

func (c *ghClient) RemoveLabel(ctx context.Context, ref IssueRef, name string) error {
	resp, err := c.gh.Issues.RemoveLabelForIssue(ctx, ref.Owner, ref.Name, ref.Number, name)
	err = mapErr(fmt.Sprintf("remove label %s from %s", name, ref), resp, err)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

func (c *ghClient) RepoLabel(ctx context.Context, repo Repo, name string) (Label, error) {
	l, resp, err := c.gh.Issues.GetLabel(ctx, repo.Owner, repo.Name, name)
	if err != nil {
		return Label{}, mapErr(fmt.Sprintf("get label %s of %s", name, repo), resp, err)
	}
	return Label{Name: l.GetName(), Color: l.GetColor(), Description: l.GetDescription()}, nil
}

func (c *ghClient) CreateLabel(ctx context.Context, repo Repo, l Label) error {
	_, resp, err := c.gh.Issues.CreateLabel(ctx, repo.Owner, repo.Name, &github.Label{
		Name: github.String(l.Name), Color: github.String(l.Color), Description: github.String(l.Description),
	})
	if resp != nil && resp.StatusCode == http.StatusUnprocessableEntity {
		return nil // already_exists: someone made it meanwhile
	}
	return mapErr(fmt.Sprintf("create label %s in %s", l.Name, repo), resp, err)
}

func (c *ghClient) CreateComment(ctx context.Context, ref IssueRef, body string) (int64, error) {
	cm, resp, err := c.gh.Issues.CreateComment(ctx, ref.Owner, ref.Name, ref.Number, &github.IssueComment{Body: github.String(body)})
	if err != nil {
		return 0, mapErr("comment on "+ref.String(), resp, err)
	}
	return cm.GetID(), nil
}

func (c *ghClient) EditComment(ctx context.Context, repo Repo, id int64, body string) error {
	_, resp, err := c.gh.Issues.EditComment(ctx, repo.Owner, repo.Name, id, &github.IssueComment{Body: github.String(body)})
	return mapErr(fmt.Sprintf("edit comment %d in %s", id, repo), resp, err)
}

func (c *ghClient) GetComment(ctx context.Context, repo Repo, id int64) (Comment, error) {
	cm, resp, err := c.gh.Issues.GetComment(ctx, repo.Owner, repo.Name, id)
	if err != nil {
		return Comment{}, mapErr(fmt.Sprintf("get comment %d in %s", id, repo), resp, err)
	}
	return toComment(cm), nil
}

func toComment(cm *github.IssueComment) Comment {
	return Comment{ID: cm.GetID(), Body: cm.GetBody(), Author: cm.GetUser().GetLogin(), AuthorBot: cm.GetUser().GetType() == "Bot"}
}

func (c *ghClient) Comments(ctx context.Context, ref IssueRef) ([]Comment, error) {
	var out []Comment
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for page := 0; page < 50; page++ {
		cms, resp, err := c.gh.Issues.ListComments(ctx, ref.Owner, ref.Name, ref.Number, opts)
		if err != nil {
			return nil, mapErr("list comments of "+ref.String(), resp, err)
		}
		for _, cm := range cms {
			out = append(out, toComment(cm))
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	return out, nil
}

func (c *ghClient) RepoInfo(ctx context.Context, repo Repo) (RepoInfo, error) {
	r, resp, err := c.gh.Repositories.Get(ctx, repo.Owner, repo.Name)
	if err != nil {
		return RepoInfo{}, mapErr("get repository "+repo.String(), resp, err)
	}
	return RepoInfo{DefaultBranch: r.GetDefaultBranch(), Private: r.GetPrivate()}, nil
}

func (c *ghClient) User(ctx context.Context, login string) (User, error) {
	u, resp, err := c.gh.Users.Get(ctx, url.PathEscape(login))
	if err != nil {
		return User{}, mapErr("get user "+login, resp, err)
	}
	return User{ID: u.GetID(), Login: u.GetLogin(), Bot: u.GetType() == "Bot"}, nil
}

func toPull(pr *github.PullRequest) Pull {
	return Pull{
		Number: pr.GetNumber(), NodeID: pr.GetNodeID(), URL: pr.GetHTMLURL(), State: pr.GetState(),
		Draft: pr.GetDraft(), Merged: pr.GetMerged(), Head: pr.GetHead().GetRef(), Base: pr.GetBase().GetRef(), Body: pr.GetBody(),
	}
}

func (c *ghClient) FindPull(ctx context.Context, repo Repo, branch string) (Pull, error) {
	prs, resp, err := c.gh.PullRequests.List(ctx, repo.Owner, repo.Name, &github.PullRequestListOptions{
		State: "open", Head: repo.Owner + ":" + branch, ListOptions: github.ListOptions{PerPage: 10},
	})
	if err != nil {
		return Pull{}, mapErr(fmt.Sprintf("find the pull request of %s in %s", branch, repo), resp, err)
	}
	for _, pr := range prs {
		if pr.GetHead().GetRef() == branch {
			return toPull(pr), nil
		}
	}
	return Pull{}, fmt.Errorf("open pull request from %s in %s: %w", branch, repo, ErrNotFound)
}

func (c *ghClient) CreatePull(ctx context.Context, repo Repo, p NewPull) (Pull, error) {
	pr, resp, err := c.gh.PullRequests.Create(ctx, repo.Owner, repo.Name, &github.NewPullRequest{
		Title: github.String(p.Title), Body: github.String(p.Body), Head: github.String(p.Head), Base: github.String(p.Base),
		Draft: github.Bool(p.Draft), MaintainerCanModify: github.Bool(true),
	})
	if err != nil {
		return Pull{}, mapErr(fmt.Sprintf("open a pull request from %s in %s", p.Head, repo), resp, err)
	}
	return toPull(pr), nil
}

func (c *ghClient) GetPull(ctx context.Context, repo Repo, number int) (Pull, error) {
	pr, resp, err := c.gh.PullRequests.Get(ctx, repo.Owner, repo.Name, number)
	if err != nil {
		return Pull{}, mapErr(fmt.Sprintf("get pull request %s#%d", repo, number), resp, err)
	}
	return toPull(pr), nil
}

func (c *ghClient) EditPullBody(ctx context.Context, repo Repo, number int, body string) error {
	_, resp, err := c.gh.PullRequests.Edit(ctx, repo.Owner, repo.Name, number, &github.PullRequest{Body: github.String(body)})
	return mapErr(fmt.Sprintf("edit pull request %s#%d", repo, number), resp, err)
}

// The GraphQL calls whilly makes: REST cannot move a pull request in or out of draft.
const (
	markReadyMutation = `mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { number isDraft } } }`
	toDraftMutation   = `mutation($id: ID!) { convertPullRequestToDraft(input: {pullRequestId: $id}) { pullRequest { number isDraft } } }`
)

// graphQLError is one entry of a GraphQL answer's errors.
type graphQLError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (c *ghClient) MarkPullReady(ctx context.Context, nodeID string) error {
	return c.setDraft(ctx, nodeID, false)
}

func (c *ghClient) ConvertPullToDraft(ctx context.Context, nodeID string) error {
	return c.setDraft(ctx, nodeID, true)
}

// setDraft moves the pull request nodeID into draft or out of it. A pull request already
// where it should be is no error.
func (c *ghClient) setDraft(ctx context.Context, nodeID string, draft bool) error {
	op, query, field, already := "mark pull request "+nodeID+" ready for review", markReadyMutation, "markPullRequestReadyForReview", "not a draft"
	if draft {
		op, query, field, already = "convert pull request "+nodeID+" to a draft", toDraftMutation, "convertPullRequestToDraft", "already a draft"
	}
	req, err := c.gh.NewRequest(http.MethodPost, c.graphQL, map[string]any{
		"query": query, "variables": map[string]any{"id": nodeID},
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	var out struct {
		Data   map[string]*struct{ PullRequest struct{ IsDraft bool } } `json:"data"`
		Errors []graphQLError                                           `json:"errors"`
	}
	resp, err := c.gh.Do(ctx, req, &out)
	if err != nil {
		return mapErr(op, resp, err)
	}
	for _, e := range out.Errors {
		switch {
		case e.Type == "NOT_FOUND":
			return fmt.Errorf("%s: %w", op, ErrNotFound)
		case e.Type == "RATE_LIMITED":
			return fmt.Errorf("%s: %w", op, &RateLimitError{Status: http.StatusOK, Wait: time.Minute})
		case strings.Contains(strings.ToLower(e.Message), already):
			return nil
		}
	}
	if len(out.Errors) > 0 {
		return fmt.Errorf("%s: GraphQL: %s", op, out.Errors[0].Message)
	}
	if got := out.Data[field]; got == nil || got.PullRequest.IsDraft != draft {
		return fmt.Errorf("%s: GitHub did not change it", op)
	}
	return nil
}

func (c *ghClient) Dispatch(ctx context.Context, repo Repo, eventType string, payload map[string]any) error {
	raw, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encode the %s dispatch payload: %w", eventType, err)
	}
	msg := json.RawMessage(raw)
	_, resp, err := c.gh.Repositories.Dispatch(ctx, repo.Owner, repo.Name, github.DispatchRequestOptions{EventType: eventType, ClientPayload: &msg})
	return mapErr(fmt.Sprintf("send %s to %s", eventType, repo), resp, err)
}

// ghApp is AppClient over go-github with the App's JWT transport.
type ghApp struct{ gh *github.Client }

func (c *ghApp) HookDeliveries(ctx context.Context, since time.Time) ([]HookDelivery, error) {
	var out []HookDelivery
	opts := &github.ListCursorOptions{PerPage: 100}
	for page := 0; page < 100; page++ {
		ds, resp, err := c.gh.Apps.ListHookDeliveries(ctx, opts)
		if err != nil {
			return nil, mapErr("list webhook deliveries", resp, err)
		}
		old := false
		for _, d := range ds {
			at := d.GetDeliveredAt().Time
			if at.Before(since) {
				old = true
				continue
			}
			out = append(out, HookDelivery{
				ID: d.GetID(), GUID: d.GetGUID(), DeliveredAt: at, StatusCode: d.GetStatusCode(),
				Event: d.GetEvent(), Action: d.GetAction(), Redelivery: d.GetRedelivery(),
			})
		}
		if old || resp.Cursor == "" || len(ds) == 0 {
			break
		}
		opts.Cursor = resp.Cursor
	}
	return out, nil
}

func (c *ghApp) HookDelivery(ctx context.Context, id int64) (HookDelivery, []byte, error) {
	d, resp, err := c.gh.Apps.GetHookDelivery(ctx, id)
	if err != nil {
		return HookDelivery{}, nil, mapErr(fmt.Sprintf("read webhook delivery %d", id), resp, err)
	}
	out := HookDelivery{
		ID: d.GetID(), GUID: d.GetGUID(), DeliveredAt: d.GetDeliveredAt().Time, StatusCode: d.GetStatusCode(),
		Event: d.GetEvent(), Action: d.GetAction(), Redelivery: d.GetRedelivery(),
	}
	if d.Request == nil || d.Request.RawPayload == nil {
		return out, nil, fmt.Errorf("read webhook delivery %d: GitHub sent no payload", id)
	}
	return out, []byte(*d.Request.RawPayload), nil
}

func (c *ghApp) Redeliver(ctx context.Context, id int64) error {
	_, resp, err := c.gh.Apps.RedeliverHookDelivery(ctx, id)
	var accepted *github.AcceptedError
	if errors.As(err, &accepted) {
		return nil
	}
	return mapErr(fmt.Sprintf("redeliver delivery %d", id), resp, err)
}

func (c *ghApp) RepoInstallation(ctx context.Context, repo Repo) (int64, error) {
	in, resp, err := c.gh.Apps.FindRepositoryInstallation(ctx, repo.Owner, repo.Name)
	if err != nil {
		return 0, mapErr("find the installation of "+repo.String(), resp, err)
	}
	return in.GetID(), nil
}

func (c *ghApp) Self(ctx context.Context) (AppInfo, error) {
	a, resp, err := c.gh.Apps.Get(ctx, "")
	if err != nil {
		return AppInfo{}, mapErr("get the App", resp, err)
	}
	return AppInfo{ID: a.GetID(), Slug: a.GetSlug(), Name: a.GetName()}, nil
}

func (c *ghApp) RepoToken(ctx context.Context, installationID int64, repo Repo) (Token, error) {
	tok, resp, err := c.gh.Apps.CreateInstallationToken(ctx, installationID, &github.InstallationTokenOptions{
		Repositories: []string{repo.Name},
		Permissions:  &github.InstallationPermissions{Contents: github.String("write")},
	})
	if err != nil {
		return Token{}, mapErr(fmt.Sprintf("mint a token of installation %d for %s", installationID, repo), resp, err)
	}
	if tok.GetToken() == "" {
		return Token{}, fmt.Errorf("mint a token of installation %d for %s: GitHub answered no token", installationID, repo)
	}
	return Token{Value: tok.GetToken(), ExpiresAt: tok.GetExpiresAt().Time}, nil
}

// mapErr turns go-github's and ghinstallation's errors into whilly's: ErrNotFound,
// *RateLimitError, *StatusError, each wrapped with what was being done. A token exchange
// that GitHub refused (ghinstallation's, before the call itself) is none of those: the
// App's credentials failed, not the call, and trying again may succeed (a clock back in
// step, a key rotated), so it is a plain error that says so.
func mapErr(op string, resp *github.Response, err error) error {
	if err == nil {
		return nil
	}
	var (
		rl     *github.RateLimitError
		abuse  *github.AbuseRateLimitError
		er     *github.ErrorResponse
		hErr   *ghinstallation.HTTPError
		token  bool
		status int
		header http.Header
		msg    string
	)
	switch {
	case errors.As(err, &rl):
		wait := time.Until(rl.Rate.Reset.Time) + time.Second
		return fmt.Errorf("%s: %w", op, &RateLimitError{Status: http.StatusForbidden, Wait: max(wait, time.Second)})
	case errors.As(err, &abuse):
		wait := time.Minute
		if abuse.RetryAfter != nil {
			wait = *abuse.RetryAfter
		}
		return fmt.Errorf("%s: %w", op, &RateLimitError{Status: http.StatusForbidden, Wait: max(wait, time.Second)})
	case errors.As(err, &er) && er.Response != nil:
		status, header, msg = er.Response.StatusCode, er.Response.Header, er.Message
		// A 422 says what is wrong in its errors ("A pull request already exists …").
		for _, e := range er.Errors {
			switch {
			case e.Message != "":
				msg += "; " + e.Message
			case e.Code != "":
				msg += "; " + strings.TrimSpace(e.Resource+" "+e.Field+" "+e.Code)
			}
		}
	case errors.As(err, &hErr) && hErr.Response != nil:
		// ghinstallation leaves the body of a failed token request open.
		_ = hErr.Response.Body.Close()
		status, header = hErr.Response.StatusCode, hErr.Response.Header
		token = true
	case resp != nil && resp.Response != nil && resp.StatusCode >= 300:
		status, header = resp.StatusCode, resp.Header
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
	if wait, ok := rateLimitWait(status, header, time.Now()); ok {
		return fmt.Errorf("%s: %w", op, &RateLimitError{Status: status, Wait: wait})
	}
	if status == http.StatusNotFound || status == http.StatusGone {
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	}
	if token {
		return fmt.Errorf("%s: GitHub answered HTTP %d to the installation token exchange; check the App's ID, its private key and this machine's clock", op, status)
	}
	return fmt.Errorf("%s: %w", op, &StatusError{Status: status, Message: msg})
}

// rateLimitWait reads GitHub's rate-limit answer: 403 or 429 with Retry-After (seconds),
// or with X-RateLimit-Remaining 0 and X-RateLimit-Reset (epoch seconds). A 429 without
// either waits a minute, as GitHub's documentation advises.
func rateLimitWait(status int, h http.Header, now time.Time) (time.Duration, bool) {
	if status != http.StatusForbidden && status != http.StatusTooManyRequests {
		return 0, false
	}
	if s := h.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			return max(time.Duration(n)*time.Second, time.Second), true
		}
	}
	if h.Get("X-RateLimit-Remaining") == "0" {
		if n, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64); err == nil {
			return max(time.Unix(n, 0).Sub(now)+time.Second, time.Second), true
		}
	}
	if status == http.StatusTooManyRequests {
		return time.Minute, true
	}
	return 0, false
}
