package parquet

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// Publish is phase two: it swaps the staged run into place in one atomic
// rename (renameat2 RENAME_EXCHANGE; two renames where the filesystem lacks
// it), then keeps the previous version among the retained ones (versions.go)
// and removes those beyond retention. Called again after a crash at any
// point, it finishes the job: a target already holding the run's version
// means the swap happened, and settle retires what it swapped out. A
// version published before (current or retained, e.g. after a rollback)
// is left as it is. Every step is fenced by the target's lease when this
// Sink holds it for the run.
func (s *Sink) Publish(ctx context.Context, run sinks.RunInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, err := s.dirs(run)
	if err != nil {
		return err
	}
	if err := s.fence(d.target, run); err != nil {
		return err
	}
	if err := s.settle(d.target, run.Job); err != nil {
		return fmt.Errorf("parquet: publish %s: %w", d.target, err)
	}
	retained, err := retainedDirs(d.target, run.Job)
	if err != nil {
		return err
	}
	if alreadyPublished(d.target, run) {
		s.finish(d, run)
		return nil
	}
	if m, err := ReadMarker(d.staging); err != nil || m.Version != run.Version {
		return fmt.Errorf("parquet: publish run %s to %s: staging dir %s is not staged (Stage must succeed first): %v", run.RunID, d.target, d.staging, err)
	}
	// Never move readers back behind a later published run: the target,
	// the retained versions and (after a crash between two renames) the
	// run moved aside name every version published here. The caller holds
	// the target's lease, so nothing publishes between this check and the
	// swap.
	latest, _ := publishedVersion(d.old, run.Job)
	if v, ours := publishedVersion(d.target, run.Job); ours {
		latest = jobs.LatestVersion(latest, v)
	}
	for v := range retained {
		latest = jobs.LatestVersion(latest, v)
	}
	if err := sinks.CheckPublishOrder("parquet "+d.target, run.Version, latest); err != nil {
		return err
	}
	// Stage checked this; a file dropped into the target since must not be
	// swapped out.
	if err := checkOwned(d.target, run.Job); err != nil {
		return err
	}
	if err := s.fence(d.target, run); err != nil {
		return err
	}
	prev, _ := publishedVersion(d.target, run.Job)
	if err := s.swapIn(d.staging, d.target, prev); err != nil {
		return fmt.Errorf("parquet: publish %s: %w", d.target, err)
	}
	s.finish(d, run)
	return nil
}

// finish retires what the swap left in staging (the previous version) and
// applies retention, after the publish happened: what cannot be done is
// logged, and the next publish, rollback or gc settles it.
func (s *Sink) finish(d dirs, run sinks.RunInfo) {
	if err := s.fence(d.target, run); err != nil {
		return
	}
	if err := s.settle(d.target, run.Job); err != nil {
		slog.Warn("parquet: previous version not yet kept after publish", "target", d.target, "err", err)
	}
	cleanUp(d.staging) // nothing published is in it any more: leftovers of this run
	if err := s.prune(d.target, run.Job); err != nil {
		slog.Warn("parquet: retention not applied after publish", "target", d.target, "err", err)
	}
}

// cleanUp removes directories whose content no reader needs, file by
// precog file: what cannot go (a file precog did not write) is logged and
// left.
func cleanUp(dirs ...string) {
	for _, dir := range dirs {
		if err := removeOwned(dir); err != nil {
			slog.Warn("parquet: directory left behind after publish", "dir", dir, "err", err)
		}
	}
}

// Abort removes the run's staging directory, file by precog file; a
// published run is untouched, current or retained. A directory its publish
// moved aside goes too once the target exists again (while the target is
// missing it is the only copy of the previous run, and stays). A retained
// version beyond retention (what gc finds left over) goes. A file precog
// did not write stays, and the error names it. It needs only the run's
// Job, Version and Params.
func (s *Sink) Abort(ctx context.Context, run sinks.RunInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, err := s.dirs(run)
	if err != nil {
		return err
	}
	if err := s.fence(d.target, run); err != nil {
		return err
	}
	// A staging directory holding a published version (cut between its
	// swap and its retirement) is no run's leftovers: keep it.
	if v, ok := publishedVersion(d.staging, run.Job); !ok || v == run.Version {
		if err := removeOwned(d.staging); err != nil {
			return fmt.Errorf("parquet: abort run %s version %s: %w", run.RunID, run.Version, err)
		}
	}
	if _, err := os.Lstat(d.target); err == nil {
		if err := removeOwned(d.old); err != nil {
			return fmt.Errorf("parquet: abort run %s version %s: %w", run.RunID, run.Version, err)
		}
	}
	dirs, err := retainedDirs(d.target, run.Job)
	if err != nil {
		return err
	}
	if dir, ok := dirs[run.Version]; ok && !s.keeps(d.target, run.Job, dirs, run.Version) {
		if err := removeOwned(dir); err != nil {
			return fmt.Errorf("parquet: remove version %s beyond retention: %w", run.Version, err)
		}
	}
	return nil
}

// keeps reports whether retention keeps version among the retained dirs.
func (s *Sink) keeps(target, job string, dirs map[string]string, version string) bool {
	cur, _ := publishedVersion(target, job)
	all := slices.Collect(mapsKeys(dirs))
	if cur != "" {
		all = append(all, cur)
	}
	keep, _ := sinks.Retained(all, cur, s.retain)
	return slices.Contains(keep, version)
}

// writeFileSync writes path through a fsynced temporary file and a rename.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync dir: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
