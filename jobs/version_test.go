package jobs

import (
	"slices"
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

// TestVersionOrder: versions order by creation (the time part before the
// first "-"), then by text; two of one time part are created together.
// The text order alone puts "v-1" after "v+9" ('-' sorts after '+').
func TestVersionOrder(t *testing.T) {
	at := time.Date(2026, 11, 3, 14, 5, 1, 0, time.UTC)
	old, a := Version("20261103t140501-ffff"), NewVersion(at)
	b := NewVersion(at.Add(time.Microsecond))
	for _, c := range []struct {
		v, w  Version
		after bool
		cmp   int
	}{
		{b, a, true, 1},
		{a, b, false, -1},
		{a, old, true, 1}, // a fraction sorts after the bare second
		{"20261103t140501-0000", old, false, -1},
		{"v+9", "v-1", true, 1},
		{"v-1", "v+9", false, -1},
		{"v2", "v2", false, 0},
	} {
		if got := c.v.CreatedAfter(c.w); got != c.after {
			t.Errorf("%q.CreatedAfter(%q) = %v, want %v", c.v, c.w, got, c.after)
		}
		if got := c.v.Compare(c.w); got != c.cmp {
			t.Errorf("%q.Compare(%q) = %d, want %d", c.v, c.w, got, c.cmp)
		}
	}
	vs := []string{"v-1", "v+9", "v+5-a", ""}
	if got := LatestVersion(vs...); got != "v+9" {
		t.Errorf("LatestVersion(%q) = %q, want v+9", vs, got)
	}
	if got := LatestVersion(); got != "" {
		t.Errorf("LatestVersion() = %q, want none", got)
	}
	slices.SortFunc(vs, NewestVersionFirst)
	if want := []string{"v+9", "v+5-a", "v-1", ""}; !slices.Equal(vs, want) {
		t.Errorf("NewestVersionFirst sorted %q, want %q", vs, want)
	}
}
