package open

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/jobs/ledger"
	"github.com/precog-ml/precog/jobs/ledger/bolt"
	"github.com/precog-ml/precog/jobs/ledger/postgres"
)

func mustOpen(t *testing.T, loc Location, opts Options) ledger.Store {
	t.Helper()
	l, err := Open(context.Background(), loc, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", loc, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestOpenChooses: a DSN opens the Postgres ledger (the state dir is left
// alone), a state dir alone the embedded ledger there.
func TestOpenChooses(t *testing.T) {
	dir := t.TempDir()
	pg := mustOpen(t, Location{StateDir: dir, DSN: testservers.Postgres(t).DSN}, Options{Postgres: postgres.Options{PollInterval: time.Hour}})
	if _, ok := pg.(*postgres.Ledger); !ok {
		t.Fatalf("Open with a DSN = %T, want *postgres.Ledger", pg)
	}
	if _, err := os.Stat(bolt.PathIn(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open with a DSN touched the state dir: %v", err)
	}
	emb := mustOpen(t, Location{StateDir: dir}, Options{})
	if _, ok := emb.(*bolt.Ledger); !ok {
		t.Fatalf("Open with a state dir = %T, want *bolt.Ledger", emb)
	}
	if _, err := os.Stat(bolt.PathIn(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open of the embedded ledger created its file before a write: %v", err)
	}
	if got := (Location{StateDir: dir, DSN: "postgres://u:secret@h/db"}).String(); got != "the Postgres ledger" {
		t.Fatalf("Location.String() = %q, want no URL", got)
	}
}

// TestOpenExisting: Existing refuses a state dir without a ledger, naming
// the file and creating nothing, and opens one that exists.
func TestOpenExisting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	_, err := Open(context.Background(), Location{StateDir: dir}, Options{Existing: true})
	if !errors.Is(err, ErrNoLedger) {
		t.Fatalf("Open(Existing) of an empty state dir: %v, want ErrNoLedger", err)
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Fatalf("Open(Existing) created %s", dir)
	}
	l := mustOpen(t, Location{StateDir: dir}, Options{})
	if _, err := Open(context.Background(), Location{StateDir: dir}, Options{Existing: true}); !errors.Is(err, ErrNoLedger) {
		t.Fatalf("Open(Existing) of a ledger that wrote nothing yet: %v, want ErrNoLedger", err)
	}
	if err := l.CreateRun(context.Background(), jobs.Run{ID: "r1", Job: "recs"}, []jobs.Shard{{Index: 0}}); err != nil {
		t.Fatal(err)
	}
	mustOpen(t, Location{StateDir: dir}, Options{Existing: true})
	if _, err := Open(context.Background(), Location{}, Options{}); err == nil {
		t.Fatal("Open of no location succeeded")
	}
}
