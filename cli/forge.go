package cli

import (
	"github.com/spf13/cobra"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/server"
)

func (a *app) forgeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "forge",
		Short: "Work with issues on GitHub from the command line",
		Args:  noArgs,
	}
	cmd.AddCommand(a.forgeIntake())
	return cmd
}

func (a *app) forgeIntake() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "intake OWNER/REPO/N",
		Example: `  whilly forge intake acme/shop/42`,
		Short:   "Turn a GitHub issue into a plan, as labelling it whilly-pending does",
		Long: `Run GitHub intake on one issue from the command line: react 👀, build the plan (the
` + "```whilly" + ` block, else the planner of WHILLY_PLANNER, else the task list, else the whole
issue), run the decision gate in strict mode, persist the plan tied to the issue, put
whilly-in-progress on it and post the status comment. An issue whose tasks the gate
rejects all gets whilly-needs-info and a comment saying what is missing (exit 1).

It acts as the GitHub App (WHILLY_GITHUB_APP_ID and WHILLY_GITHUB_PRIVATE_KEY or _FILE;
the installation is found from the repository), or with WHILLY_GITHUB_TOKEN. Running it
again while the issue's plan is live changes nothing. WHILLY_GITHUB_API_URL points at
GitHub Enterprise Server.`,
		Args: exactArgs(1, "one issue, OWNER/REPO/N"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := ghapp.ParseIssueRef(args[0])
			if err != nil {
				return failf("%v", err)
			}
			env, hasApp, err := a.readGitHubEnv()
			if err != nil {
				return err
			}
			if !hasApp && env.Token == "" {
				return envf("%v", errNoGitHub)
			}
			ctx := cmd.Context()
			pool, err := a.openDB(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			// The control plane of `whilly serve`, built but not started: the same store
			// and hooks, so the plan's mirror (and dispatch) jobs are enqueued with it
			// (server.GitHub.IntakeOnly: over the token too when there is no App). TRIZ
			// is not needed.
			cp, err := a.newControlPlane(ctx, pool, func(c *server.Config) {
				c.GitHub.IntakeOnly = true
				c.TRIZ.Enabled = false
			})
			if err != nil {
				return err
			}
			defer func() { _ = cp.Shutdown(ctx) }()
			res, err := cp.GitHub().IntakeIssue(ctx, ref)
			if err != nil {
				return err
			}
			if asJSON {
				if err := a.writeJSON(res); err != nil {
					return err
				}
			} else {
				a.printf("%s: %s\n", ref, res.Outcome)
			}
			if !res.Planned && res.PlanID == "" {
				return failf("no plan was made for %s: %s", ref, res.Outcome)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
