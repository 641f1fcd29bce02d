package sinks

import (
	"slices"
	"testing"
)

// TestRetained: retention keeps the current version whatever its age and
// the retain-1 newest others, by creation second first.
func TestRetained(t *testing.T) {
	vs := []string{"20261101t000000-aa", "20261103t000000-01", "20261102t000000-ff", "20261104t000000-00"}
	for _, c := range []struct {
		current    string
		retain     int
		keep, drop []string
	}{
		{"20261104t000000-00", 2, []string{"20261104t000000-00", "20261103t000000-01"}, []string{"20261102t000000-ff", "20261101t000000-aa"}},
		// after a rollback the current one is older than others: kept
		{"20261101t000000-aa", 2, []string{"20261104t000000-00", "20261101t000000-aa"}, []string{"20261103t000000-01", "20261102t000000-ff"}},
		{"20261104t000000-00", 1, []string{"20261104t000000-00"}, []string{"20261103t000000-01", "20261102t000000-ff", "20261101t000000-aa"}},
		{"", 3, []string{"20261104t000000-00", "20261103t000000-01"}, []string{"20261102t000000-ff", "20261101t000000-aa"}},
	} {
		keep, drop := Retained(vs, c.current, c.retain)
		if !slices.Equal(keep, c.keep) || !slices.Equal(drop, c.drop) {
			t.Errorf("Retained(current %q, retain %d) = keep %v drop %v; want %v %v", c.current, c.retain, keep, drop, c.keep, c.drop)
		}
	}
}
