package sinks

import (
	"errors"
	"testing"
)

// TestCheckPublishOrder: a version whose creation time is earlier than the
// latest published one is superseded; the same second (random suffixes
// in either order) and later times are not.
func TestCheckPublishOrder(t *testing.T) {
	for _, c := range []struct {
		version, latest string
		superseded      bool
	}{
		{"20261126t025547-4548", "", false},
		{"20261126t025547-4548", "20261126t025539-ffff", false},
		{"20261126t025547-4548", "20261126t025547-ffff", false}, // same second
		{"20261126t025547-ffff", "20261126t025547-0000", false},
		{"20261126t025539-ffff", "20261126t025547-0000", true},
		{"v1", "v2", true},
		{"v2", "v2", false},
	} {
		err := CheckPublishOrder("redis ns", c.version, c.latest)
		var se *SupersededError
		if got := errors.As(err, &se); got != c.superseded {
			t.Errorf("CheckPublishOrder(%q, latest %q) = %v, want superseded %v", c.version, c.latest, err, c.superseded)
		} else if got && (se.Later != c.latest || !se.Permanent()) {
			t.Errorf("SupersededError = %+v, want Later %q and permanent", se, c.latest)
		}
	}
}
