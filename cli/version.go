package cli

import (
	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/internal/version"
)

func (a *app) versionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version",
		Long: `Print which build of whilly this is: its version, the commit it was built from, the
build date and the Go version and platform. 'whilly --version' prints the same.`,
		Example: `  $ whilly version
  whilly v0.1.0
  commit  7f844ef3c2a1
  built   2026-12-01T15:20:00Z
  go      go1.26.8 linux/amd64`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			info := version.Get()
			if asJSON {
				return a.writeJSON(info)
			}
			a.printf("%s", info.Text("whilly"))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
