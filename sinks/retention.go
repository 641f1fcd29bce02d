package sinks

import (
	"slices"

	"github.com/precog-ml/precog/jobs"
)

// Retained splits a target's published versions into those retention
// keeps and those it drops: current (whatever its age: a rollback may have
// made an older version current) and the retain-1 newest others. Newest
// is jobs.Version's order (creation time, then text). keep is newest
// first; drop too. The one rule for sinks that keep versions as files or
// objects (sinks/parquet, object storage), so that rollback finds the
// same versions everywhere.
func Retained(versions []string, current string, retain int) (keep, drop []string) {
	vs := slices.Clone(versions)
	slices.SortFunc(vs, jobs.NewestVersionFirst)
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
