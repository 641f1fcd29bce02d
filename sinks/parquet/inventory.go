package parquet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/precog-ml/precog/sinks"
)

var _ sinks.Inventory = (*Sink)(nil)

// Stored implements sinks.Inventory for `precog gc`: the published
// directory of run's target (when precog published it for this job), the
// versions retained beside it (Published while retention keeps them), and
// the staging and moved-aside directories precog names beside it
// (.<base>.precog-<version>, .<base>.precog-old-<version>). Nothing else in
// the parent directory is looked at, and only precog's files are counted.
//
// A staging directory is never published: after a swap it holds the
// previous run until Publish removes it. A moved-aside directory (only
// without RENAME_EXCHANGE) holds the previous run; while the target is
// missing it is the only copy (a publish was cut between its two renames)
// and is listed as Published so gc keeps it.
func (s *Sink) Stored(ctx context.Context, run sinks.RunInfo) ([]sinks.StoredVersion, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	target, err := s.Target(run)
	if err != nil {
		return nil, err
	}
	parent, base := filepath.Dir(target), filepath.Base(target)
	var out []sinks.StoredVersion
	targetExists := false
	if fi, err := os.Lstat(target); err == nil && fi.IsDir() {
		targetExists = true
		if v, ok := publishedVersion(target, run.Job); ok {
			out = append(out, sinks.StoredVersion{Version: v, Published: true, Current: true, What: describeDir("published dir", target)})
		}
	}
	names, err := readNames(parent)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("parquet: list %s: %w", parent, err)
	}
	slices.Sort(names)
	stagingPrefix, oldPrefix := "."+base+".precog-", "."+base+".precog-old-"
	for _, n := range names {
		var sv sinks.StoredVersion
		switch {
		case strings.HasPrefix(n, oldPrefix):
			sv.Version = strings.TrimPrefix(n, oldPrefix)
			sv.Published = !targetExists
			what := "previous run moved aside by a publish"
			if sv.Published {
				what = "previous run moved aside by an unfinished publish (the only copy until it finishes)"
			}
			sv.What = describeDir(what, filepath.Join(parent, n))
		case strings.HasPrefix(n, stagingPrefix):
			sv.Version = strings.TrimPrefix(n, stagingPrefix)
			sv.What = describeDir("staging dir", filepath.Join(parent, n))
			if v, ok := publishedVersion(filepath.Join(parent, n), run.Job); ok && v != sv.Version {
				// the previous version after a swap, not yet kept
				sv.Version, sv.Published = v, true
				sv.What = describeDir("previous version left in a staging dir by a publish (kept by the next one)", filepath.Join(parent, n))
			}
		default:
			continue
		}
		if sv.Version == "" {
			continue
		}
		fi, err := os.Lstat(filepath.Join(parent, n))
		if err != nil || !fi.IsDir() {
			continue // a symlink or file by a precog name is not precog's
		}
		if m, err := ReadMarker(filepath.Join(parent, n)); err == nil && m.Job != run.Job {
			continue // another job's (they share a path only by mistake)
		}
		out = append(out, sv)
	}
	dirs, err := retainedDirs(target, run.Job)
	if err != nil {
		return nil, err
	}
	for _, v := range slices.Sorted(mapsKeys(dirs)) {
		kept := s.keeps(target, run.Job, dirs, v)
		what := "retained published version"
		if !kept {
			what = fmt.Sprintf("published version beyond retention (retain %d)", s.retain)
		}
		out = append(out, sinks.StoredVersion{Version: v, Published: kept, What: describeDir(what, dirs[v])})
	}
	return out, nil
}

// publishedVersion is the version precog published for job in dir.
func publishedVersion(dir, job string) (string, bool) {
	if m, err := ReadMarker(dir); err == nil {
		return m.Version, m.Job == job
	}
	if succ, err := ReadSuccess(dir); err == nil {
		return succ.Version, succ.Job == job
	}
	return "", false
}

// describeDir names dir with the number and size of precog's files in it,
// and says whether it also holds files precog did not write (which stay).
func describeDir(what, dir string) string {
	names, err := readNames(dir)
	if err != nil {
		return fmt.Sprintf("%s %s (unreadable: %v)", what, dir, err)
	}
	var files, bytes int64
	var foreign int
	for _, n := range names {
		if !isPrecogFile(n) {
			foreign++
			continue
		}
		if fi, err := os.Lstat(filepath.Join(dir, n)); err == nil && fi.Mode().IsRegular() {
			files++
			bytes += fi.Size()
		}
	}
	desc := fmt.Sprintf("%s %s (%d files, %s)", what, dir, files, humanBytes(bytes))
	if foreign > 0 {
		desc += fmt.Sprintf("; %d files precog did not write stay", foreign)
	}
	return desc
}

// humanBytes formats n as "12.3 MB" (powers of 1000).
func humanBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}
