package backfill

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLedgerTxnCost: a state directory not made yet is sampled in its
// nearest existing parent, and the sample leaves no file behind.
func TestLedgerTxnCost(t *testing.T) {
	dir := t.TempDir()
	if d := ledgerTxnCost(filepath.Join(dir, "state", "not", "yet")); d <= 0 {
		t.Errorf("ledgerTxnCost of a state dir to be made = %v, want a sampled commit", d)
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("the sample left %v (%v)", left, err)
	}
}
