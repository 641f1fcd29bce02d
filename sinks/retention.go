package sinks

import (
	"cmp"
	"slices"
)

// Retained splits a target's published versions into those retention
// keeps and those it drops: current (whatever its age: a rollback may have
// made an older version current) and the retain-1 newest others. Newest
// means the later VersionStamp, then the greater version. keep is newest
// first; drop too. The one rule for sinks that keep versions as files or
// objects (sinks/parquet, object storage), so that rollback finds the
// same versions everywhere.
func Retained(versions []string, current string, retain int) (keep, drop []string) {
	vs := slices.Clone(versions)
	slices.SortFunc(vs, NewestFirst)
	vs = slices.Compact(vs)
	others := 0
	for _, v := range vs {
		switch {
		case v == current:
			keep = append(keep, v)
		case others < retain-1:
			keep = append(keep, v)
			others++
		default:
			drop = append(drop, v)
		}
	}
	return keep, drop
}

// NewestFirst orders versions for slices.SortFunc: the later VersionStamp
// first, then the greater version.
func NewestFirst(a, b string) int {
	if c := cmp.Compare(VersionStamp(b), VersionStamp(a)); c != 0 {
		return c
	}
	return cmp.Compare(b, a)
}
