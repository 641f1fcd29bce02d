package jobs

import (
	"strings"
	"testing"
	"time"
)

// TestVersion: a new version sorts by creation time, reads back its time
// and passes validation; ParseVersion refuses what some sink cannot hold.
func TestVersion(t *testing.T) {
	at := time.Date(2026, 11, 3, 14, 5, 1, 250_000_000, time.FixedZone("CET", 3600))
	v := NewVersion(at)
	if !strings.HasPrefix(v.String(), "20261103t130501.250000-") || len(v) != len("20261103t130501.250000-a3f9") {
		t.Fatalf("NewVersion = %q", v)
	}
	if got, ok := v.Time(); !ok || !got.Equal(at) {
		t.Fatalf("Time() = %v %v, want %v", got, ok, at)
	}
	if later := NewVersion(at.Add(time.Second)); later <= v {
		t.Fatalf("%q does not sort after %q", later, v)
	}
	// Within one second, by creation too (the random suffix used to
	// decide: issue 31), whatever the suffixes.
	for range 32 {
		if a, b := NewVersion(at), NewVersion(at.Add(time.Microsecond)); b <= a {
			t.Fatalf("%q, made a microsecond later, does not sort after %q", b, a)
		}
	}
	// A version an older precog made (to the second) still reads back,
	// and sorts before the versions of a later second.
	old := Version("20261103t130501-ffff")
	if got, ok := old.Time(); !ok || !got.Equal(at.Truncate(time.Second)) {
		t.Fatalf("Time() of an older version = %v %v, want %v", got, ok, at.Truncate(time.Second))
	}
	if later := NewVersion(at.Add(time.Second)); later <= old {
		t.Fatalf("%q does not sort after the older %q", later, old)
	}
	if _, err := ParseVersion(v.String()); err != nil {
		t.Fatal(err)
	}
	for _, ok := range []string{"v1", "run-7", "2026.11.03"} {
		if _, err := ParseVersion(ok); err != nil {
			t.Errorf("ParseVersion(%q): %v", ok, err)
		}
		if _, isNew := Version(ok).Time(); isNew {
			t.Errorf("%q read as a time", ok)
		}
	}
	for _, bad := range []string{"", ".", "..", "a b", "a:b", "a/b", `a\b`, "a*", "{x}", "a\x00", strings.Repeat("v", 129)} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted it", bad)
		}
	}
}
