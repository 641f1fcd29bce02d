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
	ledgertest.Exercise(t, func(t *testing.T) ledger.Ledger {
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
