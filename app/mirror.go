package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// KindMirror is the River job that brings an issue to its plan's state. It is
// persisted: never rename it.
const KindMirror = "whilly.github_mirror"

// MirrorArgs names the plan to mirror. Jobs are unique per plan while waiting or
// running, which is what coalesces a busy plan's changes into few edits. Verify makes
// the job read the issue's labels and comment back from GitHub and repair any drift
// (the reconciler); otherwise it trusts what it last wrote. Final is the sync of a plan
// that has ended (DONE, FAILED or CANCELLED): it does not wait for the plan's turn
// (interval), and is unique beside the plan's paced job, which may be waiting for its
// turn already and then finds nothing left to write. (A false Final is left out of the
// args, so the paced job's unique key is what it always was.)
type MirrorArgs struct {
	PlanID string `json:"plan_id" river:"unique"`
	Verify bool   `json:"verify,omitempty"`
	Final  bool   `json:"final,omitempty" river:"unique"`
}

// Kind implements river.JobArgs.
func (MirrorArgs) Kind() string { return KindMirror }

// InsertOpts makes mirror jobs unique per plan in every state but completed, cancelled
// and discarded: a change while a job waits or runs joins that job. They come after
// dispatch and reconciling (priority 2) and before push-token revocations (3);
// deliveries have a queue of their own (queue.QueueGitHubIntake).
func (MirrorArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		Queue:       queue.QueueGitHub,
		Priority:    2,
		MaxAttempts: 25,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
			rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled,
		}},
	}
}

// Jobs inserts River jobs; *river.Client[pgx.Tx] is one.
type Jobs interface {
	Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// MirrorConfig tunes the mirror.
type MirrorConfig struct {
	// Coalesce is the least time between two syncs of one plan; default 3 s. Changes
	// in between are written together by the next sync.
	Coalesce time.Duration
	// PublicURL (WHILLY_PUBLIC_URL) is used for links in the status comment.
	PublicURL string
	// InstallationSyncsPerMinute overrides the syncs an installation's live plans share
	// in a minute (default InstallationSyncsPerMinute); tests that follow a plan through
	// several syncs raise it.
	InstallationSyncsPerMinute int
}

// Mirror writes a plan's state onto its issue: exactly one state label and the status
// comment, edited in place, and, once the plan has pushed, onto its pull request (see
// syncPull). It writes only what changed since its last write.
type Mirror struct {
	store   *queue.Store
	clients Clients
	log     *slog.Logger
	cfg     MirrorConfig
}

// NewMirror returns the mirror.
func NewMirror(store *queue.Store, clients Clients, log *slog.Logger, cfg MirrorConfig) *Mirror {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Coalesce <= 0 {
		cfg.Coalesce = 3 * time.Second
	}
	if cfg.InstallationSyncsPerMinute <= 0 {
		cfg.InstallationSyncsPerMinute = InstallationSyncsPerMinute
	}
	return &Mirror{store: store, clients: clients, log: log, cfg: cfg}
}

// Worker returns the River worker of mirror jobs.
func (m *Mirror) Worker() river.Worker[MirrorArgs] { return &mirrorWorker{m: m} }

type mirrorWorker struct {
	river.WorkerDefaults[MirrorArgs]
	m *Mirror
}

// Timeout is the lock's own limit: a run never outlives the lock it holds.
func (w *mirrorWorker) Timeout(*river.Job[MirrorArgs]) time.Duration { return queue.MirrorLockTTL }

func (w *mirrorWorker) Work(ctx context.Context, job *river.Job[MirrorArgs]) error {
	m, planID := w.m, job.Args.PlanID
	st, err := m.store.GetMirrorState(ctx, planID)
	if errors.Is(err, queue.ErrNotFound) {
		return nil // the plan was deleted
	}
	if err != nil {
		return err
	}
	if !job.Args.Verify && !job.Args.Final && st.SyncedAt != nil {
		interval, err := m.interval(ctx, planID)
		if err != nil {
			return err
		}
		if wait := interval - time.Since(*st.SyncedAt); wait > 0 {
			return river.JobSnooze(wait)
		}
	}
	var sync queue.MirrorSync
	locked, err := m.store.WithMirrorLock(ctx, planID, func(ctx context.Context) error {
		var err error
		sync, err = m.sync(ctx, st, job.Args.Verify)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		// The issue, repository or installation is gone: retrying cannot help.
		m.log.WarnContext(ctx, "mirror target gone on GitHub", "plan_id", planID, "error", err)
		return river.JobCancel(err)
	}
	if err != nil {
		m.log.WarnContext(ctx, "mirror to GitHub failed", "plan_id", planID, "error", err)
		return JobError(err)
	}
	if !locked {
		return river.JobSnooze(time.Second)
	}
	dirty, err := m.store.FinishMirror(ctx, planID, sync, func(ctx context.Context, tx pgx.Tx, dirty bool) error {
		if dirty {
			return nil
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
	if err != nil {
		return err
	}
	if dirty {
		return river.JobSnooze(m.cfg.Coalesce)
	}
	return nil
}

// InstallationSyncsPerMinute is how many syncs the live plans of one installation share
// in a minute: one every 10 s for a plan alone. A sync writes at most three times (a
// state label added and one removed, the comment edited) and usually once. GitHub allows
// an installation about 80 content writes a minute and 500 an hour; 6 syncs a minute are
// 360 an hour, which leaves the rest of the hour for the labels, comments, reactions and
// pull requests of new issues. With 20 (an hour of a busy installation: 1,200 syncs),
// bench scale also wrote 0.181–0.213 times per task transition over eleven runs, against
// the target of 0.2; with 6, 0.142–0.150 over six.
const InstallationSyncsPerMinute = 6

// interval is the least time between two syncs of plan planID: its share of the
// installation's syncs a minute among its live plans, or the configured coalescing when
// that is longer.
func (m *Mirror) interval(ctx context.Context, planID string) (time.Duration, error) {
	n, err := m.store.InstallationLivePlans(ctx, planID)
	if err != nil {
		return 0, err
	}
	return max(m.cfg.Coalesce, time.Duration(n)*time.Minute/time.Duration(m.cfg.InstallationSyncsPerMinute)), nil
}

// SyncNow mirrors a plan at once, outside River (`whilly forge intake`). It does
// nothing when a mirror job holds the plan: that job writes the same state.
func (m *Mirror) SyncNow(ctx context.Context, planID string) error {
	st, err := m.store.GetMirrorState(ctx, planID)
	if err != nil {
		return err
	}
	var sync queue.MirrorSync
	locked, err := m.store.WithMirrorLock(ctx, planID, func(ctx context.Context) error {
		var err error
		sync, err = m.sync(ctx, st, false)
		return err
	})
	if err != nil || !locked {
		return err
	}
	_, err = m.store.FinishMirror(ctx, planID, sync, nil)
	return err
}

// sync writes the plan's label and status comment to its issue and says what it wrote.
// Without verify it trusts st (what it wrote last) and writes only what differs; with
// verify, or on the first sync, it reads the issue's labels and comment back.
func (m *Mirror) sync(ctx context.Context, st queue.MirrorState, verify bool) (queue.MirrorSync, error) {
	pi, err := m.store.GetPlan(ctx, st.PlanID)
	if err != nil {
		return queue.MirrorSync{}, err
	}
	tasks, err := m.store.Tasks(ctx, st.PlanID)
	if err != nil {
		return queue.MirrorSync{}, err
	}
	ref, err := ParseIssueRef(pi.GitHubIssueRef)
	if err != nil {
		return queue.MirrorSync{}, fmt.Errorf("plan %s: %w", pi.ID, err)
	}
	c, err := m.clients.Installation(ctx, pi.InstallationID)
	if err != nil {
		return queue.MirrorSync{}, err
	}
	want := LabelFor(pi)
	if verify || st.Label == "" {
		have, err := c.IssueLabels(ctx, ref)
		if err != nil {
			return queue.MirrorSync{}, err
		}
		if err := m.SetStateLabel(ctx, c, ref, want, have); err != nil {
			return queue.MirrorSync{}, err
		}
	} else if st.Label != want {
		if err := m.SetStateLabel(ctx, c, ref, want, []string{st.Label}); err != nil {
			return queue.MirrorSync{}, err
		}
	}

	rounds, err := m.store.Rounds(ctx, pi.ID)
	if err != nil {
		return queue.MirrorSync{}, err
	}
	pr, err := m.syncPull(ctx, c, ref, pi, tasks, st, rounds, verify)
	if Permanent(err) {
		// GitHub refuses the pull request (no permission yet, nothing to compare …): the
		// issue still gets its label and comment; the next change tries again.
		m.log.WarnContext(ctx, "pull request not synced", "plan_id", pi.ID, "error", err)
		pr, err = st.Pull, nil
	}
	if err != nil {
		return queue.MirrorSync{}, err
	}
	view := StatusView{Plan: pi, Tasks: tasks, PublicURL: m.cfg.PublicURL, Source: st.Source, Notes: st.Notes, Pull: pr, Rounds: rounds}
	if err := m.pauseView(ctx, &view); err != nil {
		return queue.MirrorSync{}, err
	}
	body := RenderStatus(view)
	sum := sha256.Sum256([]byte(body))
	if verify || pi.CommentID == 0 || !bytes.Equal(sum[:], st.BodySHA256) {
		if err := m.writeComment(ctx, c, ref, pi, body, verify); err != nil {
			return queue.MirrorSync{}, err
		}
	}
	return queue.MirrorSync{Version: st.Version, Label: want, BodySHA256: sum[:]}, nil
}

// SetStateLabel makes want the issue's only state label, given the labels it has (or
// may have): want is added first (created in the repository if missing), then every
// other state label among have is removed.
func (m *Mirror) SetStateLabel(ctx context.Context, c Client, ref IssueRef, want string, have []string) error {
	if !slices.Contains(have, want) {
		if err := m.EnsureLabel(ctx, c, ref.Repo, want); err != nil {
			return err
		}
		if err := c.AddLabels(ctx, ref, want); err != nil {
			return err
		}
	}
	for _, l := range have {
		if l != want && IsStateLabel(l) {
			if err := c.RemoveLabel(ctx, ref, l); err != nil {
				return err
			}
		}
	}
	return nil
}

// EnsureLabel creates a state label in the repository, with its colour and description,
// unless whilly knows it exists. GitHub would otherwise create it bare when it is first
// put on an issue.
func (m *Mirror) EnsureLabel(ctx context.Context, c Client, repo Repo, name string) error {
	def, ok := StateLabel(name)
	if !ok {
		return nil
	}
	known, err := m.store.LabelKnown(ctx, repo.String(), name)
	if err != nil || known {
		return err
	}
	if _, err := c.RepoLabel(ctx, repo, name); errors.Is(err, ErrNotFound) {
		if err := c.CreateLabel(ctx, repo, def); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	return m.store.RecordLabel(ctx, repo.String(), name)
}

// writeComment edits the status comment in place: the recorded one, else the one found
// by its marker among whilly's own comments, else a new one, whose id is then recorded.
// A comment with the marker by anyone else — a person, or another App's bot — is never
// adopted: whilly would then edit, and show as its own, a comment someone else wrote.
func (m *Mirror) writeComment(ctx context.Context, c Client, ref IssueRef, pi queue.PlanInfo, body string, verify bool) error {
	planID, id := pi.ID, pi.CommentID
	if id != 0 && verify {
		cm, err := c.GetComment(ctx, ref.Repo, id)
		switch {
		case errors.Is(err, ErrNotFound):
			id = 0
		case err != nil:
			return err
		case cm.Body == body:
			return nil
		}
	}
	if id != 0 {
		err := c.EditComment(ctx, ref.Repo, id, body)
		if !errors.Is(err, ErrNotFound) {
			return err
		}
		id = 0 // deleted by hand: post it again
	}
	self, err := m.clients.Login(ctx, pi.InstallationID)
	if err != nil {
		return err
	}
	cms, err := c.Comments(ctx, ref)
	if err != nil {
		return err
	}
	marker := Marker(planID)
	for _, cm := range cms {
		if strings.EqualFold(cm.Author, self) && strings.HasPrefix(cm.Body, marker+"\n") {
			id = cm.ID
			if cm.Body != body {
				if err := c.EditComment(ctx, ref.Repo, id, body); err != nil {
					return err
				}
			}
			break
		}
	}
	if id == 0 {
		if id, err = c.CreateComment(ctx, ref, body); err != nil {
			return err
		}
	}
	return m.store.SetStatusComment(ctx, planID, id)
}

// pauseView adds to the view what the comment says about pauses: the fleet's, and the
// digest of a plan awaiting approval.
func (m *Mirror) pauseView(ctx context.Context, v *StatusView) error {
	f, err := m.store.GetFleet(ctx)
	if err != nil {
		return err
	}
	v.FleetPaused = f.Paused
	if v.Plan.Status == plan.PlanPaused && v.Plan.PauseReason == queue.PauseApproval {
		v.Digest = queue.DigestOf(v.Plan, v.Tasks)
	}
	return nil
}
