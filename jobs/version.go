package jobs

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Version names a run's data in every sink: the middle part of its Redis
// keys, the suffix of its Postgres run table, its Parquet directory. It is
// the one owner of their format: NewVersion creates them, ParseVersion
// reads one given from outside (a flag, a store), Validate says what every
// sink can hold, Compare and CreatedAfter order them (retention, rollback,
// the publish-order rule). Run.Version and sinks.RunInfo.Version carry it
// as text.
type Version string

// versionTime is the time part of a version NewVersion makes: sortable,
// UTC, lower-case, so that it is an identifier fragment everywhere, to
// the microsecond (versionFraction), so that versions sort by creation
// even within one second: retention and rollback order a sink's versions
// by it. Versions written by a precog before the fraction (2026-11-27)
// end at the second; as text they sort before every version of a later
// time, and before the versions of their own second that have a fraction.
const (
	versionTime     = "20060102t150405"
	versionFraction = ".000000"
)

// maxVersionLen bounds a version: a Redis key part like a namespace.
const maxVersionLen = 128

// NewVersion makes the version of a run created at now: its UTC time to
// the microsecond and 4 random hex digits (20261103t140501.123456-a3f9),
// so that versions sort by creation and two runs created at once differ.
func NewVersion(now time.Time) Version {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return Version(now.UTC().Format(versionTime+versionFraction) + "-" + hex.EncodeToString(b[:]))
}

// ParseVersion reads a version given from outside, validated.
func ParseVersion(s string) (Version, error) {
	v := Version(s)
	if err := v.Validate(); err != nil {
		return "", err
	}
	return v, nil
}

// Validate reports a version no sink can hold: empty, longer than 128
// bytes, "." or "..", or with whitespace, a control character, ':' (the
// Redis key separator), glob characters, braces (Redis hash tags) or a
// path separator. Versions from NewVersion always pass; so do the plain
// names tests and older runs use (v1, run-7).
func (v Version) Validate() error {
	s := string(v)
	switch {
	case s == "":
		return errors.New("run version is empty")
	case len(s) > maxVersionLen:
		return fmt.Errorf("run version %q is longer than %d bytes", s, maxVersionLen)
	case s == "." || s == "..":
		return fmt.Errorf("run version %q cannot name a directory", s)
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || strings.ContainsRune(":*?[]\\{}/", r) {
			return fmt.Errorf("run version %q: character %q not allowed (no whitespace, ':', '/', glob characters or braces)", s, r)
		}
	}
	return nil
}

// Time is when a version NewVersion made was created (to the second for
// a version an older precog made); ok is false for a version of another
// form.
func (v Version) Time() (t time.Time, ok bool) {
	// Parse reads a fraction after the seconds that the layout omits.
	t, err := time.Parse(versionTime, v.stamp())
	return t, err == nil
}

// stamp is the part of a version that orders it: up to its first "-"
// (the creation time of a version NewVersion made), the whole version
// when it has none.
func (v Version) stamp() string {
	stamp, _, _ := strings.Cut(string(v), "-")
	return stamp
}

// CreatedAfter reports whether v was created after w: its time part is
// later in byte order. Two versions of one time part (made at the same
// microsecond, or by an older precog in the same second) are created
// together: neither is after the other. The publish-order rule
// (sinks.CheckPublishOrder) refuses a version some published one was
// created after; sinks/redis's cutover script applies the same rule
// inside Redis.
func (v Version) CreatedAfter(w Version) bool { return v.stamp() > w.stamp() }

// Compare orders versions by creation, then by the whole text, so that
// the order is total: -1 when v is older, 0 when equal, +1 when newer.
// Retention and rollback list a sink's versions in this order.
func (v Version) Compare(w Version) int {
	if c := cmp.Compare(v.stamp(), w.stamp()); c != 0 {
		return c
	}
	return cmp.Compare(v, w)
}

// NewestVersionFirst orders version texts newest first (Compare reversed), for
// slices.SortFunc over the versions a sink lists.
func NewestVersionFirst(a, b string) int { return Version(b).Compare(Version(a)) }

// LatestVersion is the newest of vs by Compare; "" when there is none.
func LatestVersion(vs ...string) string {
	latest := ""
	for _, v := range vs {
		if latest == "" || Version(v).Compare(Version(latest)) > 0 {
			latest = v
		}
	}
	return latest
}

func (v Version) String() string { return string(v) }
