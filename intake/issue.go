package intake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/queue"
)

// ErrIssueRefused is why IntakeIssue took no issue in: the App is not installed on its
// repository, the issue does not exist or is not visible, or it is closed. The error
// wrapping it is one sentence saying which.
var ErrIssueRefused = errors.New("issue refused")

// refusal is an ErrIssueRefused whose text is its sentence alone.
type refusal string

func (r refusal) Error() string      { return string(r) }
func (refusal) Is(target error) bool { return target == ErrIssueRefused }

// IntakeIssue runs intake on one issue at an operator's request (whilly forge intake), as
// labelling it whilly-pending does, and writes the plan's labels and status comment at
// once rather than when a control plane gets to the mirror job. Acting as the App, it
// finds the installation from the store, else from GitHub; with a token there is none.
// The operator is trusted: the issue need not carry whilly-pending, and nobody's
// permission is asked. A second call while the issue's plan is live changes nothing.
func (g *GitHub) IntakeIssue(ctx context.Context, ref app.IssueRef) (Result, error) {
	var inst int64
	if g.Factory.HasApp() {
		var err error
		if inst, err = g.installationOf(ctx, ref.Repo); err != nil {
			return Result{}, err
		}
	}
	c, err := g.Factory.Installation(ctx, inst)
	if err != nil {
		return Result{}, err
	}
	is, err := c.Issue(ctx, ref)
	if errors.Is(err, app.ErrNotFound) {
		return Result{}, refusal(fmt.Sprintf("issue %s does not exist or is not visible", ref))
	}
	if err != nil {
		return Result{}, err
	}
	if is.State == "closed" {
		return Result{}, refusal(fmt.Sprintf("issue %s is closed", ref))
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	res, err := g.Intake.Intake(ctx, Request{
		Ref: ref, InstallationID: inst, DeliveryID: "cli-" + hex.EncodeToString(id), Explicit: true,
		Issue: IssueText{Ref: ref, Title: is.Title, Body: is.Body},
	})
	if err != nil {
		return res, err
	}
	if res.Planned {
		if err := g.Mirror.SyncNow(ctx, res.PlanID); err != nil {
			return res, err
		}
	}
	return res, nil
}

// installationOf is the App's installation on repo: the one its webhooks recorded, else
// the one GitHub names.
func (g *GitHub) installationOf(ctx context.Context, repo app.Repo) (int64, error) {
	inst, err := g.Intake.Store().InstallationForRepo(ctx, repo.String())
	if !errors.Is(err, queue.ErrNotFound) {
		return inst, err
	}
	ac, err := g.Factory.App(ctx)
	if err != nil {
		return 0, err
	}
	inst, err = ac.RepoInstallation(ctx, repo)
	if errors.Is(err, app.ErrNotFound) {
		return 0, refusal(fmt.Sprintf("the GitHub App is not installed on %s", repo))
	}
	return inst, err
}
