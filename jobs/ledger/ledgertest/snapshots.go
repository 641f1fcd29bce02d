package ledgertest

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/precog-ml/precog/jobs/ledger"
)

// testSnapshots: a ledger either keeps snapshots until Stop (Kick and Stop
// return; the embedded ledger's own test reads them back), or says
// ledger.ErrUnsupported and keeps none.
func testSnapshots(t *testing.T, l ledger.Store) {
	create(t, l, "recs", "a", 1)
	s, err := l.KeepSnapshots(context.Background(), slog.Default())
	if errors.Is(err, ledger.ErrUnsupported) {
		if s != nil {
			t.Fatalf("KeepSnapshots said ErrUnsupported and returned %T", s)
		}
		return
	}
	if err != nil {
		t.Fatalf("KeepSnapshots: %v", err)
	}
	s.Kick()
	s.Kick()
	s.Stop()
	s.Stop() // a second Stop returns too
}
