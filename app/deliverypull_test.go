package app

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// Polls racing on two pools (two replicas) fetch each delivery once and store it once:
// the cursor's lease lets one poll at a time, and the others skip.
func TestConcurrentPollsFetchEachDeliveryOnce(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	f, err := NewFactory(Config{AppID: gh.AppID, PrivateKey: gh.KeyPEM, APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	dsn := testkit.DSN(t)
	ctx := context.Background()
	var received atomic.Int32
	var pullers []*DeliveryPuller
	for range 2 {
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		st := queue.NewStore(pool, nil, queue.Config{})
		pullers = append(pullers, NewDeliveryPuller(st, f, nil, PullConfig{AppID: gh.AppID, Events: []string{"issues"},
			Receive: func(ctx context.Context, guid, event string, payload []byte) (string, error) {
				stored, err := st.RecordDelivery(ctx, queue.Delivery{ID: guid, Event: event, Payload: payload},
					func(context.Context, pgx.Tx) error { return nil })
				if stored {
					received.Add(1)
				}
				return "queued", err
			}}))
	}
	var ds []testkit.FakeHookDelivery
	for i := range 5 {
		ds = append(ds, gh.LogDelivery("issues", "guid-"+strconv.Itoa(i), []byte(`{"action":"labeled","installation":{"id":1}}`)))
	}
	for round := range 3 {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := pullers[i%2].Poll(ctx); err != nil {
					t.Errorf("round %d: poll: %v", round, err)
				}
			}()
		}
		wg.Wait()
	}
	if n := received.Load(); n != 5 {
		t.Errorf("%d deliveries stored, want 5", n)
	}
	for _, d := range ds {
		if n := gh.CountRequests("GET", `/app/hook/deliveries/`+strconv.FormatInt(d.ID, 10)); n != 1 {
			t.Errorf("delivery %d fetched %d times, want once", d.ID, n)
		}
	}
}

// A delivery that cannot be fetched stops the poll before it: the cursor stays, the
// next poll takes it, and the deliveries after it are not lost.
func TestAPollThatFailsLeavesTheDeliveryToTheNext(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	f, err := NewFactory(Config{AppID: gh.AppID, PrivateKey: gh.KeyPEM, APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	var got []string
	p := NewDeliveryPuller(st, f, nil, PullConfig{AppID: gh.AppID, Events: []string{"issues"},
		Receive: func(ctx context.Context, guid, event string, payload []byte) (string, error) {
			_, err := st.RecordDelivery(ctx, queue.Delivery{ID: guid, Event: event, Payload: payload}, func(context.Context, pgx.Tx) error { return nil })
			got = append(got, guid)
			return "queued", err
		}})
	first := testkit.FakeHookDelivery{ID: 1, GUID: "a", DeliveredAt: time.Now().Add(-10 * time.Second), StatusCode: 502,
		Event: "issues", Action: "opened", Payload: []byte(`{"action":"opened"}`)}
	gh.AddHookDelivery(first)
	gh.AddHookDelivery(testkit.FakeHookDelivery{ID: 2, GUID: "b", DeliveredAt: time.Now().Add(-5 * time.Second), StatusCode: 502,
		Event: "issues", Action: "opened", Payload: []byte(`{"action":"opened"}`)})
	gh.Fail(testkit.Fault{Method: "GET", Path: `/app/hook/deliveries/` + strconv.FormatInt(first.ID, 10), Status: 502, Times: 1})
	ctx := context.Background()
	if _, err := p.Poll(ctx); err == nil {
		t.Error("a poll whose fetch failed reported no error")
	}
	if len(got) != 0 {
		t.Fatalf("received %v after the first delivery failed, want nothing", got)
	}
	if res, err := p.Poll(ctx); err != nil || res.Received != 2 {
		t.Fatalf("second poll: %+v, %v; want both deliveries", res, err)
	}
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Errorf("received %v, want [a b] in log order", got)
	}
}

// A JWT GitHub refuses stops every poll: the poll job says so at WARN, with what to
// check, instead of failing silently.
func TestAPollWithARefusedJWTSaysWhatToCheck(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	f, err := NewFactory(Config{AppID: gh.AppID, PrivateKey: gh.KeyPEM, APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	gh.Fail(testkit.Fault{Method: "GET", Path: `^/app/hook/deliveries$`, Status: 401})
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p := NewDeliveryPuller(queue.NewStore(testkit.DB(t), nil, queue.Config{}), f, log, PullConfig{AppID: gh.AppID, Events: []string{"issues"},
		Receive: func(context.Context, string, string, []byte) (string, error) { return "queued", nil }})
	if err := p.Worker().Work(context.Background(), nil); err == nil {
		t.Error("the poll job succeeded with a refused JWT")
	}
	const want = `level=WARN msg="GitHub refuses the App's JWT, so no webhook delivery is pulled: check WHILLY_GITHUB_APP_ID and WHILLY_GITHUB_PRIVATE_KEY (whilly doctor checks them)"`
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log:\n%s\nwant %s", logs.String(), want)
	}
}
