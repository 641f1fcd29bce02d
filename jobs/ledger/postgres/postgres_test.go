package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/ledgertest"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// open returns a ledger on a fresh database, polling fast for tests.
func open(t testing.TB, dsn string) *Ledger {
	t.Helper()
	l, err := Open(context.Background(), dsn, Options{PollInterval: time.Hour})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func TestConformance(t *testing.T) {
	ledgertest.Exercise(t, func(t *testing.T) ledger.Store {
		return open(t, testservers.Postgres(t).DSN)
	})
}

// TestConcurrentOpen: ten workers starting at once on an empty database
// migrate it once, and all of them work.
func TestConcurrentOpen(t *testing.T) {
	pg := testservers.Postgres(t)
	var wg sync.WaitGroup
	ls := make([]*Ledger, 10)
	errs := make([]error, 10)
	for i := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls[i], errs[i] = Open(context.Background(), pg.DSN, Options{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		defer ls[i].Close()
	}
	var versions, applied int
	if err := pg.Pool(t).QueryRow(context.Background(), `SELECT count(*), max(version) FROM precog_schema`).Scan(&applied, &versions); err != nil {
		t.Fatal(err)
	}
	if applied != SchemaVersion() || versions != SchemaVersion() {
		t.Fatalf("precog_schema has %d rows up to version %d, want %d", applied, versions, SchemaVersion())
	}
	if err := ls[3].CreateRun(context.Background(), jobs.Run{ID: "r1", Job: "recs"}, []jobs.Shard{{Index: 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ls[7].Claim(context.Background(), "r1", "w", time.Minute); err != nil {
		t.Fatalf("Claim through another ledger: %v", err)
	}
}

// TestSchemaTooNew: a database migrated by a newer precog is refused.
func TestSchemaTooNew(t *testing.T) {
	pg := testservers.Postgres(t)
	open(t, pg.DSN).Close()
	pg.Exec(t, `INSERT INTO precog_schema (version) VALUES ($1)`, SchemaVersion()+1)
	_, err := Open(context.Background(), pg.DSN, Options{})
	if err == nil || !errors.Is(err, errSchemaNewer) || !strings.Contains(err.Error(), fmt.Sprintf("version %d", SchemaVersion()+1)) {
		t.Fatalf("Open of a newer schema = %v, want a refusal naming version %d", err, SchemaVersion()+1)
	}
}

// TestDSNNotInErrors: the password never shows in Open's errors.
func TestDSNNotInErrors(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u:leak-me@[bad", // does not parse
		"postgres://u:leak-me@127.0.0.1:1/db?sslmode=disable&connect_timeout=2", // nobody listens
	} {
		_, err := Open(context.Background(), dsn, Options{})
		if err == nil || strings.Contains(err.Error(), "leak-me") {
			t.Fatalf("Open(%q) error = %v, want one without the password", dsn, err)
		}
	}
}

// TestListenReconnects: after a Postgres restart the LISTEN connection
// comes back and notices wake workers again without polling.
func TestListenReconnects(t *testing.T) {
	srv := testservers.NewPostgres(t)
	l := open(t, srv.DSN)
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := l.Wake(ctx, "p")
	srv.Restart(t, 200*time.Millisecond)
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		for len(ch) > 0 {
			<-ch
		}
		if err := l.CreateRun(ctx, jobs.Run{ID: fmt.Sprintf("r%d", i), Job: fmt.Sprintf("j%d", i), Pool: "p"}, nil); err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("CreateRun after restart: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		select {
		case <-ch:
			return
		case <-time.After(2 * time.Second):
			if time.Now().After(deadline) {
				t.Fatalf("no wake-up from NOTIFY within 20s of a restart")
			}
		}
	}
}

// TestRetryRun: a failed run comes back to running with its failed shards
// pending and committed ones kept; a succeeded run cannot; a failed run
// whose params have another open run meanwhile names it.
func TestRetryRun(t *testing.T) {
	ctx := context.Background()
	l := open(t, testservers.Postgres(t).DSN)
	mk := func(id string) jobs.Run {
		now := time.Now().UTC()
		r := jobs.Run{ID: id, Job: "recs", Version: id, ParamsKey: "date=1", Pool: "default", State: jobs.RunPending, Shards: 2, CreatedAt: now, UpdatedAt: now}
		sh := []jobs.Shard{{RunID: id, Index: 0, Plan: []byte(`{}`)}, {RunID: id, Index: 1, Plan: []byte(`{}`)}}
		if err := l.CreateRun(ctx, r, sh); err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := mk("r1")
	s, err := l.Claim(ctx, r.ID, "w", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, ledger.CompleteParams{RunID: r.ID, Shard: s.Index, Worker: "w", Counts: jobs.Counts{RowsIn: 5, RowsOut: 5}}); err != nil {
		t.Fatal(err)
	}
	s, _ = l.Claim(ctx, r.ID, "w", time.Minute)
	if err := l.Fail(ctx, ledger.FailParams{RunID: r.ID, Shard: s.Index, Worker: "w", Msg: "boom", Retry: false, MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetRunState(ctx, r.ID, jobs.RunFailed, "shard 1 failed"); err != nil {
		t.Fatal(err)
	}
	n, err := l.RetryRun(ctx, r.ID)
	if err != nil || n != 1 {
		t.Fatalf("RetryRun = %d, %v; want 1 shard moved", n, err)
	}
	got, _ := l.Run(ctx, r.ID)
	shards, _ := l.Shards(ctx, r.ID)
	if got.State != jobs.RunRunning || got.Error != "" || shards[0].State != jobs.ShardCommitted || shards[1].State != jobs.ShardPending {
		t.Fatalf("after RetryRun: run %s %q, shards %s/%s", got.State, got.Error, shards[0].State, shards[1].State)
	}
	// The retried run is a new generation: workers key their prepared
	// sinks by it (the failure aborted the run in every sink).
	if got.Retries != 1 {
		t.Fatalf("Retries after one RetryRun = %d, want 1", got.Retries)
	}
	if cr, _, err := l.ClaimNext(ctx, ledger.ClaimNextParams{Pool: "default", Worker: "w2", Lease: time.Minute}); err != nil || cr.Retries != 1 {
		t.Fatalf("ClaimNext of the retried run = %+v, %v; want Retries 1", cr, err)
	}
	// Fail it again, open another run of the same params: retry names it.
	if err := l.SetRunState(ctx, r.ID, jobs.RunFailed, "again"); err != nil {
		t.Fatal(err)
	}
	mk("r2")
	var open *ledger.OpenRunError
	if _, err := l.RetryRun(ctx, r.ID); !errors.As(err, &open) || open.RunID != "r2" {
		t.Fatalf("RetryRun with r2 open = %v, want an OpenRunError naming r2", err)
	}
	if err := l.SetRunState(ctx, "r2", jobs.RunSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := l.RetryRun(ctx, "r2"); !errors.Is(err, ledger.ErrRunFinished) {
		t.Fatalf("RetryRun of a succeeded run = %v, want ErrRunFinished", err)
	}
}
