package cli

import (
	"context"
	"errors"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/queue"
)

// The pause and approval commands: whilly pause | resume, whilly plan pause | resume |
// approve. With --connect they call a control plane's API with an admin token; without,
// they call the same store functions (queue/pause.go) on the local database, as the local
// user. Either way the rule is the store's, and the event names who did it.

// adminOptions are the flags of a command that may go through a control plane's API.
type adminOptions struct {
	connect   string
	tokenFile string
	insecure  bool
	asJSON    bool
}

func (o *adminOptions) flags(f *pflag.FlagSet) {
	f.StringVar(&o.connect, "connect", "", "control plane URL; its API is called with an admin token (default: the local database)")
	f.StringVar(&o.tokenFile, "token-file", "", "with --connect: file holding the admin token (default $WHILLY_API_TOKEN)")
	f.BoolVar(&o.insecure, "insecure", false, "with --connect: allow plain http:// to a non-loopback host")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
}

// adminAPI is the client of the control plane at o.connect with the admin token of
// --token-file or WHILLY_API_TOKEN.
func (a *app) adminAPI(o adminOptions) (*client.Client, error) {
	return a.connectAPI(o.connect, o.tokenFile, o.insecure, "whilly-cli", "--connect needs an admin token in --token-file or WHILLY_API_TOKEN (mint one with 'whilly admin token mint --owner EMAIL --admin')")
}

// connectAPI is the client of the control plane at connect with the token of tokenFile,
// else WHILLY_API_TOKEN (secrets never come from flags); missing is the error without one.
func (a *app) connectAPI(connect, tokenFile string, insecure bool, userAgent, missing string) (*client.Client, error) {
	token, err := a.cfg.Secret(config.APIToken)
	if err != nil {
		return nil, envf("%w", err)
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, envf("read the token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token == "" {
		return nil, envf("%s", missing)
	}
	api, err := client.New(connect, token, client.Options{Insecure: insecure, UserAgent: userAgent})
	if err != nil {
		return nil, envf("%v", err)
	}
	return api, nil
}

// apiErr turns an API refusal into the CLI's exit codes: the control plane's own sentence
// and exit 1 for a refused change, exit 2 for a refused token or an unreachable server.
func apiErr(o adminOptions, err error) error {
	var ce *client.Error
	switch {
	case err == nil:
		return nil
	case client.IsUnauthorized(err) || client.IsForbidden(err):
		return envf("the control plane at %s refused the token (an admin token is needed): %v", o.connect, err)
	case errors.As(err, &ce) && ce.Status >= 400 && ce.Status < 500:
		return failf("%s", strings.TrimSuffix(ce.Message, "."))
	}
	return envf("cannot reach the control plane at %s: %v", o.connect, err)
}

func (a *app) pauseCommand() *cobra.Command {
	var o adminOptions
	cmd := &cobra.Command{
		Use:   "pause",
		Short: "Pause the whole fleet: no task is claimed anywhere until 'whilly resume'",
		Long: `Pause the whole fleet (global pause): from now on no worker gets a task, on any plan.
Attempts already running go on and may complete or fail. Waiting workers keep waiting
and get their tasks as soon as the fleet resumes. Writes system.paused naming who paused
it; the status comments of plans from GitHub issues say that whilly is paused. Pausing a
paused fleet changes nothing.

Without --connect it changes the local database (WHILLY_DATABASE_URL, or the embedded
one) as the local user; with --connect URL it calls POST /v1/admin/pause with the admin
token in --token-file or WHILLY_API_TOKEN.`,
		Example: `  whilly pause
  WHILLY_API_TOKEN=whilly_a_… whilly pause --connect https://whilly.example.com`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.setFleet(cmd.Context(), o, true)
		},
	}
	o.flags(cmd.Flags())
	return cmd
}

func (a *app) resumeCommand() *cobra.Command {
	var o adminOptions
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Resume the fleet paused with 'whilly pause'",
		Long: `Resume the fleet: workers claim tasks again, waiting ones at once. Writes
system.resumed naming who resumed it. Resuming a running fleet changes nothing. Plans
paused one by one stay paused ('whilly plan resume ID').`,
		Example: `  whilly resume
  whilly resume --connect https://whilly.example.com --token-file ~/.whilly-admin`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.setFleet(cmd.Context(), o, false)
		},
	}
	o.flags(cmd.Flags())
	return cmd
}

func (a *app) setFleet(ctx context.Context, o adminOptions, pause bool) error {
	var f client.Fleet
	if o.connect != "" {
		api, err := a.adminAPI(o)
		if err != nil {
			return err
		}
		if pause {
			f, err = api.PauseFleet(ctx)
		} else {
			f, err = api.ResumeFleet(ctx)
		}
		if err != nil {
			return apiErr(o, err)
		}
	} else {
		err := a.withStore(ctx, func(st *queue.Store) error {
			set := st.ResumeFleet
			if pause {
				set = st.PauseFleet
			}
			qf, err := set(ctx, queue.Actor{By: localUser()})
			f = client.Fleet{Paused: qf.Paused, PausedBy: qf.PausedBy, PausedAt: qf.PausedAt, Changed: qf.Changed}
			return err
		})
		if err != nil {
			return err
		}
	}
	if o.asJSON {
		return a.writeJSON(f)
	}
	switch {
	case f.Paused && f.Changed:
		a.printf("fleet paused by %s: no task is claimed until 'whilly resume'; running attempts finish\n", termLine(f.PausedBy))
	case f.Paused:
		a.printf("the fleet was already paused by %s since %s\n", termLine(f.PausedBy), f.PausedAt.Local().Format(time.DateTime))
	case f.Changed:
		a.printf("fleet resumed: workers claim tasks again\n")
	default:
		a.printf("the fleet was not paused\n")
	}
	return nil
}

// planChange is what the plan pause commands print, from the API or the local store.
type planChange struct {
	PlanID      string `json:"plan_id"`
	Status      string `json:"status"`
	PauseReason string `json:"pause_reason,omitempty"`
	Changed     bool   `json:"changed"`
	Digest      string `json:"digest,omitempty"`
}

// changePlanCmd runs one of the plan pause commands: through the API with --connect,
// else on the local store as the local user.
func (a *app) changePlanCmd(ctx context.Context, o adminOptions, planID string,
	remote func(*client.Client) (client.PlanChangeResponse, error),
	local func(*queue.Store, queue.Actor) (queue.PlanChange, error)) (planChange, error) {
	if o.connect != "" {
		api, err := a.adminAPI(o)
		if err != nil {
			return planChange{}, err
		}
		res, err := remote(api)
		if err != nil {
			return planChange{}, apiErr(o, err)
		}
		return planChange{PlanID: res.Plan.ID, Status: string(res.Plan.Status), PauseReason: res.Plan.PauseReason, Changed: res.Changed, Digest: res.Digest}, nil
	}
	var out planChange
	err := a.withStore(ctx, func(st *queue.Store) error {
		ch, err := local(st, queue.Actor{By: localUser()})
		if err != nil {
			return err
		}
		out = planChange{PlanID: ch.Plan.ID, Status: string(ch.Plan.Status), PauseReason: ch.Plan.PauseReason, Changed: ch.Changed, Digest: ch.Digest}
		return nil
	})
	if errors.Is(err, queue.ErrInvalid) {
		return out, failf("%v", err)
	}
	return out, err
}

func (a *app) planPause() *cobra.Command {
	var o adminOptions
	cmd := &cobra.Command{
		Use:   "pause ID",
		Short: "Pause a plan: none of its tasks is claimed until 'whilly plan resume ID'",
		Long: `Pause an ACTIVE plan (PAUSED, reason operator): none of its tasks is claimed; attempts
already running finish. Writes plan.paused naming who paused it. A paused plan is left
as it is. With --connect it calls POST /v1/plans/ID/pause with an admin token.`,
		Example: `  whilly plan pause demo
  whilly plan pause gh/acme/shop/12 --connect https://whilly.example.com --json`,
		Args: exactArgs(1, "one plan id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ch, err := a.changePlanCmd(ctx, o, args[0],
				func(api *client.Client) (client.PlanChangeResponse, error) { return api.PausePlan(ctx, args[0]) },
				func(st *queue.Store, ac queue.Actor) (queue.PlanChange, error) { return st.PausePlan(ctx, args[0], ac) })
			if err != nil || o.asJSON {
				return a.orJSON(ch, err)
			}
			if ch.Changed {
				a.printf("plan %s paused: none of its tasks is claimed until 'whilly plan resume %s'\n", termLine(ch.PlanID), termLine(ch.PlanID))
			} else {
				a.printf("plan %s was already paused (%s)\n", termLine(ch.PlanID), termLine(ch.PauseReason))
			}
			return nil
		},
	}
	o.flags(cmd.Flags())
	return cmd
}

func (a *app) planResume() *cobra.Command {
	var o adminOptions
	cmd := &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a plan paused with 'whilly plan pause'",
		Long: `Resume a plan paused with 'whilly plan pause' and write plan.resumed. A plan paused on
its budget resumes when its budget is raised ('whilly plan budget ID USD'), one awaiting
approval when it is approved ('whilly plan approve ID'): this command refuses both and
says so. With --connect it calls POST /v1/plans/ID/resume with an admin token.`,
		Example: `  whilly plan resume demo`,
		Args:    exactArgs(1, "one plan id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ch, err := a.changePlanCmd(ctx, o, args[0],
				func(api *client.Client) (client.PlanChangeResponse, error) { return api.ResumePlan(ctx, args[0]) },
				func(st *queue.Store, ac queue.Actor) (queue.PlanChange, error) {
					return st.ResumePlan(ctx, args[0], ac)
				})
			if err != nil || o.asJSON {
				return a.orJSON(ch, err)
			}
			if ch.Changed {
				a.printf("plan %s resumed: its tasks are claimed again\n", termLine(ch.PlanID))
			} else {
				a.printf("plan %s is %s: nothing to resume\n", termLine(ch.PlanID), ch.Status)
			}
			return nil
		},
	}
	o.flags(cmd.Flags())
	return cmd
}

func (a *app) planApprove() *cobra.Command {
	var (
		o      adminOptions
		digest string
	)
	cmd := &cobra.Command{
		Use:   "approve ID [--digest D]",
		Short: "Approve a plan awaiting approval (WHILLY_REQUIRE_APPROVAL) so that its tasks run",
		Long: `Approve a plan created PAUSED for approval (WHILLY_REQUIRE_APPROVAL=1): it becomes ACTIVE
and plan.approved records who approved it and the plan's content digest.

--digest D is the digest you reviewed (the status comment and 'whilly plan show ID --json'
show it): when the plan changed since, it is refused and nothing is written. Without
--digest the plan is approved as it is now. With --connect it calls
POST /v1/plans/ID/approve with an admin token.`,
		Example: `  whilly plan approve gh/acme/shop/12 --digest 5f0c2e4b8a7d9c1e3f5a7b9d1c3e5f7a9b1d3f5e7a9c1b3d5f7e9a1c3b5d7f90
  whilly plan approve demo`,
		Args: exactArgs(1, "one plan id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ch, err := a.changePlanCmd(ctx, o, args[0],
				func(api *client.Client) (client.PlanChangeResponse, error) {
					return api.ApprovePlan(ctx, args[0], client.ApproveRequest{Digest: digest})
				},
				func(st *queue.Store, ac queue.Actor) (queue.PlanChange, error) {
					return st.ApprovePlan(ctx, args[0], digest, ac)
				})
			if err != nil || o.asJSON {
				return a.orJSON(ch, err)
			}
			a.printf("plan %s approved (digest %s): its tasks may now be claimed\n", termLine(ch.PlanID), ch.Digest)
			return nil
		},
	}
	o.flags(cmd.Flags())
	cmd.Flags().StringVar(&digest, "digest", "", "the plan's content digest as reviewed; refused when the plan changed since")
	return cmd
}

// orJSON returns err, or prints v as JSON.
func (a *app) orJSON(v any, err error) error {
	if err != nil {
		return err
	}
	return a.writeJSON(v)
}
