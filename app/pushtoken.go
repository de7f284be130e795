package app

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"golang.org/x/sync/errgroup"

	"github.com/whilly-go/whilly/queue"
)

// Push tokens: every claim of a repository plan gets a token of its own,
// minted for that one repository with contents: write only, handed to that lease alone,
// and revoked on GitHub (DELETE /installation/token) once the lease ends — completed,
// failed, released, expired, or its worker revoked. Until then the control plane keeps
// the token in push_tokens, sealed under a key of its own (sealer) and bound to its
// lease, so a reader of the database alone gets nothing that pushes.

// KindRevokePushTokens is the River job that revokes the push tokens of ended leases.
// It is persisted: never rename it.
const KindRevokePushTokens = "whilly.github_revoke_push_tokens"

// RevokePushTokensArgs names the installation whose plans' ended leases' tokens to
// revoke: one job for all of its plans, however many leases ended (nil every plan: the
// periodic sweep).
type RevokePushTokensArgs struct {
	Installation *int64 `json:"installation_id,omitempty"`
	// PlanID names the plan of a job enqueued before the jobs were per installation.
	PlanID string `json:"plan_id,omitempty"`
}

// Kind implements river.JobArgs.
func (RevokePushTokensArgs) Kind() string { return KindRevokePushTokens }

// InsertOpts puts revocations in the GitHub queue, which only control planes with the
// App work, behind the mirror's runs (priority 3 against 2): an issue waiting for its
// state should not wait for the revocations of a busy plan's leases, whose tokens
// expire within the hour anyway.
func (RevokePushTokensArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: queue.QueueGitHub, MaxAttempts: 25, Priority: 3}
}

// sealer seals push tokens with AES-256-GCM under a key of their own: HKDF-SHA256 over
// the seal secret (WHILLY_TOKEN_SEAL_KEY), never the App's key, so that rotating one
// does not touch the other and the App's key does not open the database's tokens. Each
// sealed token names its lease as associated data: a sealed token copied onto another
// lease's row does not open there. Former secrets only open (a rotation), and the key
// the App's private key derived before (sealed tokens without a version) opens what was
// sealed under it, for its revocation within the hour that such a token lives.
type sealer struct {
	current cipher.AEAD
	old     []cipher.AEAD
	legacy  cipher.AEAD
}

// sealVersion is the first byte of a sealed token: the seal secret's key, bound to the
// lease.
const sealVersion = 2

// MinSealKey is the shortest seal secret accepted, in bytes.
const MinSealKey = 32

func newSealKeys(secret []byte, old [][]byte, appKey *rsa.PrivateKey) (*sealer, error) {
	s := &sealer{}
	var err error
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret) // crypto/rand.Read never fails (it crashes the program instead)
	}
	if s.current, err = sealAEAD(secret); err != nil {
		return nil, err
	}
	for _, o := range old {
		a, err := sealAEAD(o)
		if err != nil {
			return nil, fmt.Errorf("a former push token seal key: %w", err)
		}
		s.old = append(s.old, a)
	}
	legacy := sha256.Sum256(append([]byte("whilly push token seal v1\x00"), x509.MarshalPKCS1PrivateKey(appKey)...))
	if s.legacy, err = gcm(legacy[:]); err != nil {
		return nil, err
	}
	return s, nil
}

// sealAEAD is the AEAD of a seal secret.
func sealAEAD(secret []byte) (cipher.AEAD, error) {
	if len(secret) < MinSealKey {
		return nil, fmt.Errorf("the push token seal key must be at least %d bytes, it is %d", MinSealKey, len(secret))
	}
	key, err := hkdf.Key(sha256.New, secret, nil, "whilly push token seal v2", 32)
	if err != nil {
		return nil, fmt.Errorf("push token seal: %w", err)
	}
	return gcm(key)
}

func gcm(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("push token seal: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("push token seal: %w", err)
	}
	return aead, nil
}

func newSealer(f *Factory) (*sealer, error) {
	if f.seal == nil {
		return nil, ErrNoApp
	}
	return f.seal, nil
}

// sealAD is the associated data of lease leaseID's token.
func sealAD(leaseID string) []byte { return []byte("whilly push token of lease " + leaseID) }

// seal seals the token of lease leaseID: version, nonce, ciphertext.
func (s *sealer) seal(token, leaseID string) ([]byte, error) {
	nonce := make([]byte, s.current.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal push token: %w", err)
	}
	out := append([]byte{sealVersion}, nonce...)
	return s.current.Seal(out, nonce, []byte(token), sealAD(leaseID)), nil
}

// open opens the token sealed for lease leaseID, under the current key or a former one.
func (s *sealer) open(sealed []byte, leaseID string) (string, error) {
	n := s.current.NonceSize()
	if len(sealed) > 1+n && sealed[0] == sealVersion {
		for _, a := range append([]cipher.AEAD{s.current}, s.old...) {
			if b, err := a.Open(nil, sealed[1:1+n], sealed[1+n:], sealAD(leaseID)); err == nil {
				return string(b), nil
			}
		}
	}
	// Sealed before the version byte, under the key the App's key derived.
	if len(sealed) > n {
		if b, err := s.legacy.Open(nil, sealed[:n], sealed[n:], nil); err == nil {
			return string(b), nil
		}
	}
	return "", errors.New("open push token: it does not open for this lease under the seal key or a former one (WHILLY_TOKEN_SEAL_KEY differs between control planes, or the row was altered)")
}

// PushTokens revokes the push tokens of ended leases: in the transaction of every plan
// change that ends one (Hooks) it enqueues the revocation of the plan's installation
// unless one waits, and a periodic sweep catches the rest (a lease that ended before its
// token was recorded).
type PushTokens struct {
	store *queue.Store
	f     *Factory
	log   *slog.Logger
	every time.Duration
}

// NewPushTokens returns the revoker; sweep is the interval of the periodic sweep
// (default 1 min).
func NewPushTokens(store *queue.Store, f *Factory, log *slog.Logger, sweep time.Duration) *PushTokens {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if sweep <= 0 {
		sweep = time.Minute
	}
	return &PushTokens{store: store, f: f, log: log, every: sweep}
}

// Worker returns the River worker of revocation jobs.
func (p *PushTokens) Worker() river.Worker[RevokePushTokensArgs] { return &revokeWorker{p: p} }

// Schedule is the sweep over every plan, which each control plane with the App enqueues.
func (p *PushTokens) Schedule() queue.Schedule {
	return queue.Schedule{Name: KindRevokePushTokens, Every: p.every, RunOnStart: true, Args: func() (river.JobArgs, *river.InsertOpts) {
		return RevokePushTokensArgs{}, &river.InsertOpts{Queue: queue.QueueGitHub, UniqueOpts: river.UniqueOpts{ByPeriod: p.every}}
	}}
}

type revokeWorker struct {
	river.WorkerDefaults[RevokePushTokensArgs]
	p *PushTokens
}

func (w *revokeWorker) Timeout(*river.Job[RevokePushTokensArgs]) time.Duration {
	return 2 * time.Minute
}

func (w *revokeWorker) Work(ctx context.Context, job *river.Job[RevokePushTokensArgs]) error {
	if job.Args.Installation != nil {
		return w.p.RevokeInstallation(ctx, *job.Args.Installation)
	}
	return w.p.RevokeEnded(ctx, job.Args.PlanID)
}

// RevokeEnded revokes on GitHub the push token of every ended lease of planID (of every
// plan when it is "": the sweep) and forgets it. Tokens that expired are forgotten unasked.
func (p *PushTokens) RevokeEnded(ctx context.Context, planID string) error {
	s, err := newSealer(p.f)
	if err != nil {
		return err
	}
	return p.revokeEnded(ctx, s, func(limit int) ([]queue.PushToken, error) {
		return p.store.EndedPushTokens(ctx, planID, limit)
	})
}

// RevokeInstallation is the revocation job of installation inst: it revokes the push
// token of every ended lease of the installation's plans. It first says that it no longer
// waits (queue.Store.StartRevocation explains why no ended lease is missed), so that a
// lease ending from then on asks for the next job; if it fails, it says again that it
// waits (its retry), so that changes meanwhile do not.
func (p *PushTokens) RevokeInstallation(ctx context.Context, inst int64) (err error) {
	s, err := newSealer(p.f)
	if err != nil {
		return err
	}
	plans, err := p.store.StartRevocation(ctx, inst)
	if err != nil {
		return err
	}
	defer func() {
		if err == nil {
			return
		}
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if merr := p.store.RetryRevocation(mctx, inst, plans); merr != nil {
			// The next change enqueues another job: a duplicate, nothing lost.
			p.log.WarnContext(ctx, "push token revocation left unmarked", "installation_id", inst, "error", merr)
		}
	}()
	return p.revokeEnded(ctx, s, func(limit int) ([]queue.PushToken, error) {
		return p.store.EndedPushTokensOf(ctx, inst, limit)
	})
}

// revokeEnded lists the ended leases' tokens a page at a time (list), until a page is not
// full: a lease that ends after that list enqueues a job of its own (RevokeInstallation),
// or is left to the sweep. A page's tokens are revoked on GitHub revokeAtOnce at a time,
// and those revoked (or expired) are forgotten in one statement, also when another
// failed: the first failure is the job's.
func (p *PushTokens) revokeEnded(ctx context.Context, s *sealer, list func(limit int) ([]queue.PushToken, error)) error {
	for {
		toks, err := list(revokePage)
		if err != nil || len(toks) == 0 {
			return err
		}
		done := make([]bool, len(toks))
		var g errgroup.Group
		g.SetLimit(revokeAtOnce)
		for i, t := range toks {
			g.Go(func() error {
				if err := p.revoke(ctx, s, t); err != nil {
					return err
				}
				done[i] = true
				return nil
			})
		}
		failed := g.Wait()
		var forget []string
		for i, t := range toks {
			if done[i] {
				forget = append(forget, t.LeaseID)
			}
		}
		if err := p.store.DeletePushTokens(ctx, forget); err != nil {
			return err
		}
		for i, t := range toks {
			if done[i] {
				p.log.InfoContext(ctx, "push token revoked", "plan_id", t.PlanID, "task_id", t.TaskID, "lease_id", t.LeaseID)
			}
		}
		if failed != nil || len(toks) < revokePage {
			return failed
		}
	}
}

// revoke revokes an ended lease's token on GitHub, unless it expired.
func (p *PushTokens) revoke(ctx context.Context, s *sealer, t queue.PushToken) error {
	if !time.Now().Before(t.ExpiresAt) {
		return nil
	}
	tok, err := s.open(t.Sealed, t.LeaseID)
	if err == nil {
		err = p.f.RevokeToken(ctx, tok)
	}
	if err != nil {
		return fmt.Errorf("revoke the push token of lease %s of plan %s: %w", t.LeaseID, t.PlanID, err)
	}
	return nil
}

// revokeAtOnce is how many tokens a revocation job revokes at a time: each is a round trip
// to GitHub, and a job one at a time held its River slot for a page's worth of them
// (100 × 250 ms in bench scale --github-latency 250ms), ahead of the mirror's runs.
const revokeAtOnce = 8

// revokePage is how many tokens revokeEnded lists at once.
const revokePage = 100

// RevokeToken revokes an installation token with the token itself
// (DELETE /installation/token). A token GitHub no longer knows (401, 404) counts as
// revoked.
func (f *Factory) RevokeToken(ctx context.Context, token string) error {
	gh := f.newGitHub(f.tr, "push_token").WithAuthToken(token)
	resp, err := gh.Apps.RevokeInstallationToken(ctx)
	if resp != nil && (resp.StatusCode == 401 || resp.StatusCode == 404) {
		return nil
	}
	return mapErr("revoke an installation token", resp, err)
}
