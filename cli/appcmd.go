package cli

import (
	"github.com/spf13/cobra"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/internal/config"
)

func (a *app) appCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "app",
		Short: "The GitHub App",
		Args:  noArgs,
	}
	cmd.AddCommand(a.appManifest(), a.appCreate())
	return cmd
}

func (a *app) appManifest() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "manifest",
		Example: `  whilly app manifest --json > manifest.json`,
		Short:   "Print the GitHub App manifest (app.yml)",
		Long: `Print whilly's GitHub App manifest: its permissions (issues, pull requests, contents and
checks write; metadata read) and the events it subscribes to. With --json it prints the
manifest in the shape GitHub's "register an App from a manifest" flow takes, the webhook
URL being WHILLY_PUBLIC_URL/webhook when WHILLY_PUBLIC_URL is set.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			if !asJSON {
				_, err := a.io.Out.Write(ghapp.ManifestYAML())
				return err
			}
			m, err := ghapp.LoadManifest()
			if err != nil {
				return err
			}
			b, err := m.FlowJSON(a.cfg.String(config.PublicURL))
			if err != nil {
				return err
			}
			_, err = a.io.Out.Write(b)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the manifest as JSON for GitHub's manifest flow")
	return cmd
}
