package ledgertest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/precog-ml/precog/jobs/ledger"
)

// testCleanups: a ledger either keeps pending sink cleanups per pool,
// oldest first, replacing the reason of a run recorded again, until
// CleanupDone; or it keeps none, and then every method says
// ledger.ErrUnsupported (what consumers branch on).
func testCleanups(t *testing.T, l ledger.Store) {
	ctx := context.Background()
	r1 := createIn(t, l, "recs", "gpu", 0, 1)
	r2 := createIn(t, l, "users", "gpu", 0, 1)
	err := l.AddCleanup(ctx, r1.ID, "redis down")
	if errors.Is(err, ledger.ErrUnsupported) {
		if _, err := l.CleanupsDue(ctx, "gpu", 10); !errors.Is(err, ledger.ErrUnsupported) {
			t.Fatalf("CleanupsDue of a ledger without cleanups: %v, want ErrUnsupported", err)
		}
		if err := l.CleanupDone(ctx, r1.ID); !errors.Is(err, ledger.ErrUnsupported) {
			t.Fatalf("CleanupDone of a ledger without cleanups: %v, want ErrUnsupported", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("AddCleanup: %v", err)
	}
	due := func(pool string, limit int) []string {
		t.Helper()
		ids, err := l.CleanupsDue(ctx, pool, limit)
		if err != nil {
			t.Fatalf("CleanupsDue(%s): %v", pool, err)
		}
		return ids
	}
	if err := l.AddCleanup(ctx, r2.ID, "redis down"); err != nil {
		t.Fatalf("AddCleanup: %v", err)
	}
	if err := l.AddCleanup(ctx, r1.ID, "still down"); err != nil {
		t.Fatalf("AddCleanup again: %v", err)
	}
	if got := due("gpu", 10); !slices.Equal(got, []string{r1.ID, r2.ID}) {
		t.Fatalf("CleanupsDue(gpu) = %v, want [%s %s] (oldest first, once each)", got, r1.ID, r2.ID)
	}
	if got := due("gpu", 1); !slices.Equal(got, []string{r1.ID}) {
		t.Fatalf("CleanupsDue(gpu, 1) = %v, want [%s]", got, r1.ID)
	}
	if got := due(ledger.DefaultPool, 10); len(got) != 0 {
		t.Fatalf("CleanupsDue(default) = %v, want none (the runs are in pool gpu)", got)
	}
	wantErr(t, "AddCleanup of an unknown run", l.AddCleanup(ctx, "no-such-run", "x"), ledger.ErrNotFound)
	if err := l.CleanupDone(ctx, r1.ID); err != nil {
		t.Fatalf("CleanupDone: %v", err)
	}
	if err := l.CleanupDone(ctx, r1.ID); err != nil {
		t.Fatalf("CleanupDone of a cleared run: %v, want nil", err)
	}
	if got := due("gpu", 10); !slices.Equal(got, []string{r2.ID}) {
		t.Fatalf("CleanupsDue(gpu) after CleanupDone(%s) = %v, want [%s]", r1.ID, got, r2.ID)
	}
}
