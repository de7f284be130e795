package cli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/queue"
)

func (a *app) adminCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "admin", Short: "Administer API tokens"}
	token := &cobra.Command{Use: "token", Short: "Mint, list and revoke API tokens (admin or read-only)"}

	var owner, expires string
	var admin, bootstrap bool
	var scopeList []string
	mint := &cobra.Command{
		Use:   "mint --owner EMAIL [--admin | --bootstrap] [--scope S]... [--expires 30d]",
		Short: "Mint an API token and print it (alone, on stdout); it is shown only once",
		Long: `Mint an API token. Read tokens may call every GET endpoint; admin tokens may also change
plans and register workers. A bootstrap token (--bootstrap) may only register workers
(POST /v1/workers/register), nothing else. Only the token's SHA-256 is stored.

--scope limits a read or bootstrap token, and every worker a bootstrap token registers,
to some plans: installation:ID (a GitHub App installation), repo:OWNER/NAME, plan:ID.
Repeat it for more; a plan outside every scope answers 404 and is never claimed.`,
		Example: `  # a bootstrap token for one repository's GitHub Actions, stored as its secret:
  whilly admin token mint --bootstrap --scope repo:acme/shop --expires 90d \
    | gh secret set WHILLY_BOOTSTRAP_TOKEN --repo acme/shop`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if admin && bootstrap {
				return failf("choose --admin or --bootstrap, not both")
			}
			if admin && len(scopeList) > 0 {
				return failf("an admin token cannot be scoped: drop --scope, or mint a read or --bootstrap token")
			}
			if owner == "" && bootstrap {
				owner = "bootstrap"
			}
			if owner == "" {
				return failf("admin token mint needs --owner (who the token is for)")
			}
			scopes, err := queue.ParseScopes(scopeList)
			if err != nil {
				return failf("%v", err)
			}
			var exp *time.Time
			if expires != "" {
				d, err := parseExpiry(expires)
				if err != nil {
					return err
				}
				t := time.Now().Add(d)
				exp = &t
			}
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				tok, info, err := st.Mint(cmd.Context(), queue.TokenSpec{Owner: owner, Admin: admin, Registrar: bootstrap, Scopes: scopes, ExpiresAt: exp})
				if err != nil {
					return err
				}
				a.printf("%s\n", tok)
				fmt.Fprintf(a.io.Err, "minted %s token %s for %s%s\n", role(info), info.Prefix, termLine(info.Owner), scopeNote(info.Scopes))
				return nil
			})
		},
	}
	mint.Flags().StringVar(&owner, "owner", "", "who the token is for (e-mail or name)")
	mint.Flags().BoolVar(&admin, "admin", false, "an admin token (default: read-only)")
	mint.Flags().BoolVar(&bootstrap, "bootstrap", false, "a bootstrap token: it may only register workers")
	mint.Flags().StringArrayVar(&scopeList, "scope", nil, "limit the token (and the workers it registers): installation:ID, repo:OWNER/NAME or plan:ID; repeatable")
	mint.Flags().StringVar(&expires, "expires", "", "lifetime such as 30d or 12h (default: never expires)")

	var asJSON bool
	list := &cobra.Command{
		Use: "list",
		Example: `  whilly admin token list
  whilly admin token list --json`,
		Short: "List API tokens (prefixes, never secrets)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				ts, err := st.ListTokens(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return a.writeJSON(map[string]any{"tokens": ts})
				}
				tw := newTable(a.io.Out)
				tw.row("PREFIX", "ROLE", "OWNER", "SCOPES", "CREATED", "EXPIRES", "REVOKED")
				for _, t := range ts {
					tw.row(t.Prefix, role(t), termLine(t.Owner), scopeText(t.Scopes), stamp(&t.CreatedAt), stamp(t.ExpiresAt), stamp(t.RevokedAt))
				}
				return tw.flush()
			})
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print as JSON")

	revoke := &cobra.Command{
		Use:     "revoke PREFIX",
		Example: `  whilly admin token revoke whilly_a_3f9cK2xQ`,
		Short:   "Revoke the token with this prefix (see 'admin token list')",
		Args:    exactArgs(1, "one token prefix"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				if err := st.RevokeToken(cmd.Context(), args[0]); err != nil {
					return err
				}
				a.printf("token %s revoked\n", args[0])
				return nil
			})
		},
	}
	token.AddCommand(mint, list, revoke)
	cmd.AddCommand(token)
	return cmd
}

func role(t queue.APIToken) string {
	switch {
	case t.Admin:
		return "admin"
	case t.Registrar:
		return "bootstrap"
	}
	return "read"
}

// scopeText shows scopes in a table cell; "-" is no limit.
func scopeText(sc queue.Scopes) string {
	if sc.Unlimited() {
		return "-"
	}
	return strings.Join(sc, ",")
}

func scopeNote(sc queue.Scopes) string {
	if sc.Unlimited() {
		return ""
	}
	return " (scopes " + strings.Join(sc, ", ") + ")"
}

func stamp(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04")
}

func (a *app) workerCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "worker", Short: "Register, list and revoke workers"}
	var asJSON bool
	list := &cobra.Command{
		Use:     "list",
		Example: `  whilly worker list --json`,
		Short:   "List workers with their status and last heartbeat",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				ws, err := st.ListWorkers(cmd.Context())
				if err != nil {
					return err
				}
				if asJSON {
					return a.writeJSON(map[string]any{"workers": ws})
				}
				if len(ws) == 0 {
					a.printf("no workers registered yet\n")
					return nil
				}
				tw := newTable(a.io.Out)
				tw.row("WORKER", "STATUS", "HOST", "LABELS", "SCOPES", "LAST HEARTBEAT", "REGISTERED")
				for _, w := range ws {
					tw.row(w.ID, w.Status, termLine(w.Hostname), fmt.Sprint(w.Labels), scopeText(w.Scopes), stamp(w.LastHeartbeat), stamp(&w.RegisteredAt))
				}
				return tw.flush()
			})
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	revoke := &cobra.Command{
		Use:     "revoke ID",
		Example: `  whilly worker revoke w-3f9c2a`,
		Short:   "Revoke a worker's token and release its tasks at once",
		Args:    exactArgs(1, "one worker id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				n, err := st.RevokeWorker(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				a.printf("worker %s revoked; %d tasks released\n", args[0], n)
				return nil
			})
		},
	}
	cmd.AddCommand(a.workerRegister(), list, revoke)
	return cmd
}

func (a *app) workerRegister() *cobra.Command {
	var connect, bootstrap, labels, owner string
	var scopeList, plans []string
	var insecure, asJSON bool
	cmd := &cobra.Command{
		Use:   "register --connect URL --bootstrap-token T [--labels a,b] [--scope S]... [--plan ID]... [--owner EMAIL]",
		Short: "Register a worker with a control plane and print its id and token",
		Long: `Register a worker with a control plane and print "worker_id: ID" and "token: TOKEN".
When standard output is not a terminal it prints the token alone there, and "worker_id: ID"
on standard error, for WORKER_TOKEN=$(whilly worker register …).
The token is shown only once: give it to whilly-worker as WHILLY_WORKER_TOKEN.
The bootstrap token may also come from WHILLY_BOOTSTRAP_TOKEN (safer than a flag).

--scope (installation:ID, repo:OWNER/NAME, plan:ID; repeatable) limits the plans the
worker may read and claim; --plan ID is --scope plan:ID. Without them the worker gets the
bootstrap token's scopes; a scoped bootstrap token refuses scopes wider than its own.

--owner records the operator's email on the worker and in its CLAIM events; a bootstrap
token minted with "whilly admin token mint --bootstrap --owner EMAIL" records its own owner.`,
		Example: `  WHILLY_BOOTSTRAP_TOKEN=whilly_b_… whilly worker register --connect https://whilly.example.com \
    --labels linux --scope repo:acme/shop
  WORKER_TOKEN=$(whilly worker register --connect https://whilly.example.com --plan shop-auth)`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if connect == "" {
				connect = a.cfg.String(config.ControlURL)
			}
			if bootstrap != "" {
				a.warnTokenFlag("--bootstrap-token", "WHILLY_BOOTSTRAP_TOKEN")
			}
			if bootstrap == "" {
				var err error
				if bootstrap, err = a.cfg.Secret(config.BootstrapToken); err != nil {
					return envf("%w", err)
				}
			}
			if connect == "" || bootstrap == "" {
				return envf("worker register needs --connect URL and --bootstrap-token (or WHILLY_CONTROL_URL and WHILLY_BOOTSTRAP_TOKEN)")
			}
			api, err := client.New(connect, bootstrap, client.Options{Insecure: insecure})
			if err != nil {
				return envf("%v", err)
			}
			host, _ := os.Hostname()
			for _, id := range plans {
				scopeList = append(scopeList, "plan:"+id)
			}
			scopes, err := queue.ParseScopes(scopeList)
			if err != nil {
				return failf("%v", err)
			}
			res, err := api.Register(cmd.Context(), client.RegisterRequest{Hostname: host, Labels: splitComma(labels), Scopes: scopes.Strings(),
				OwnerEmail: owner})
			if err != nil {
				if client.StatusOf(err) == 0 {
					return envf("cannot reach the control plane at %s: %v", connect, err)
				}
				return failf("register: %v", err)
			}
			if asJSON {
				return a.writeJSON(res)
			}
			if !isTerminal(a.io.Out) {
				// A script's WORKER_TOKEN=$(whilly worker register …): the token alone.
				a.printf("%s\n", res.Token)
				_, _ = fmt.Fprintf(a.io.Err, "worker_id: %s\n", res.WorkerID)
				if len(res.Scopes) > 0 {
					_, _ = fmt.Fprintf(a.io.Err, "scopes: %s\n", strings.Join(res.Scopes, ","))
				}
				return nil
			}
			a.printf("worker_id: %s\ntoken: %s\n", res.WorkerID, res.Token)
			if len(res.Scopes) > 0 {
				a.printf("scopes: %s\n", strings.Join(res.Scopes, ","))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&connect, "connect", "", "control plane URL (default $WHILLY_CONTROL_URL)")
	cmd.Flags().StringVar(&bootstrap, "bootstrap-token", "", "bootstrap token (prefer $WHILLY_BOOTSTRAP_TOKEN: flags show in ps)")
	cmd.Flags().StringVar(&labels, "labels", "", "comma-separated labels the worker offers (gpu, linux …)")
	cmd.Flags().StringArrayVar(&scopeList, "scope", nil, "limit the worker: installation:ID, repo:OWNER/NAME or plan:ID; repeatable")
	cmd.Flags().StringArrayVar(&plans, "plan", nil, "limit the worker to this plan (--scope plan:ID); repeatable")
	cmd.Flags().StringVar(&owner, "owner", "", "the operator's email, recorded on the worker and its claims")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "allow plain http:// to a non-loopback host")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
