package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/precog-ml/precog/internal/testservers"
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
