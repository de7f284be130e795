package cli

import (
	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/internal/pglocal"
	"github.com/whilly-go/whilly/migrations"
)

func (a *app) migrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply, roll back or list database migrations (whilly's and River's)",
	}
	up := &cobra.Command{
		Use:     "up",
		Example: `  whilly migrate up`,
		Short:   "Apply every pending migration (safe to run concurrently)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pool, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := migrations.Up(cmd.Context(), pool)
			if err != nil {
				return err
			}
			a.printf("%s\n", res)
			return nil
		},
	}
	var steps int
	var yes bool
	down := &cobra.Command{
		Use:     "down",
		Example: `  whilly migrate down --steps 1 --yes`,
		Short:   "Roll back migrations (all of them unless --steps N); destroys data",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !yes {
				ok, err := a.confirm("Roll back the schema? Rolled-back tables lose their data.")
				if err != nil {
					return err
				}
				if !ok {
					return failf("nothing was rolled back")
				}
			}
			pool, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := migrations.Down(cmd.Context(), pool, steps)
			if err != nil {
				return err
			}
			a.printf("%s\n", res)
			return nil
		},
	}
	down.Flags().IntVar(&steps, "steps", 0, "how many of whilly's migrations to roll back (0: all, River's too)")
	down.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	var asJSON bool
	status := &cobra.Command{
		Use:     "status",
		Example: `  whilly migrate status --json`,
		Short:   "List migrations and whether each is applied",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pool, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			st, err := migrations.Status(cmd.Context(), pool)
			if err != nil {
				return err
			}
			if asJSON {
				return a.writeJSON(st)
			}
			a.printf("%s", st)
			return nil
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	cmd.AddCommand(up, down, status)
	return cmd
}

func (a *app) dbCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "db",
		Short: "Manage the embedded Postgres cluster (used when WHILLY_DATABASE_URL is unset)",
	}
	var asJSON bool
	status := &cobra.Command{
		Use:     "status",
		Example: `  whilly db status --json`,
		Short:   "Show whether the embedded cluster exists and runs",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := pglocal.Status(cmd.Context(), a.dataDir())
			if err != nil {
				return err
			}
			if asJSON {
				return a.writeJSON(st)
			}
			a.printf("%s", st)
			if a.cfg.IsSet(config.DatabaseURL) {
				a.printf("note: WHILLY_DATABASE_URL is set, so whilly uses that database, not this cluster\n")
			}
			return nil
		},
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	url := &cobra.Command{
		Use:     "url",
		Example: `  psql "$(whilly db url)"`,
		Short:   "Print the database URL whilly uses (starting the embedded cluster if needed)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := a.databaseURL(cmd.Context())
			if err != nil {
				return err
			}
			a.printf("%s\n", u)
			return nil
		},
	}
	stop := &cobra.Command{
		Use:     "stop",
		Example: `  whilly db stop`,
		Short:   "Stop the embedded cluster (it starts again on the next command)",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := pglocal.Stop(cmd.Context(), a.dataDir()); err != nil {
				return err
			}
			a.printf("embedded database stopped\n")
			return nil
		},
	}
	cmd.AddCommand(status, url, stop)
	return cmd
}
