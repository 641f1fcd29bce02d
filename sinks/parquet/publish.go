package parquet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/precog-ml/precog/sinks"
)

// Publish is phase two: it swaps the staged run into place in one atomic
// rename (renameat2 RENAME_EXCHANGE; two renames where the filesystem lacks
// it) and then removes the previous run, file by precog file. Called again
// after a crash at any point, it finishes the job: a target already holding
// the run's version means the swap happened, and what is left in staging is
// the previous run, to be removed.
func (s *Sink) Publish(ctx context.Context, run sinks.RunInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, err := s.dirs(run)
	if err != nil {
		return err
	}
	if published(d.target, run) {
		cleanUp(d.staging, d.old)
		return nil
	}
	if m, err := ReadMarker(d.staging); err != nil || m.Version != run.Version {
		return fmt.Errorf("parquet: publish run %s to %s: staging dir %s is not staged (Stage must succeed first): %v", run.RunID, d.target, d.staging, err)
	}
	// Never move readers back behind a later published run: the target
	// (or, after a crash between two renames, the run moved aside) names
	// the newest version published here. The caller holds the target's
	// writer lock, so nothing publishes between this check and the swap.
	for _, dir := range []string{d.target, d.old} {
		if v, ours := publishedVersion(dir, run.Job); ours {
			if err := sinks.CheckPublishOrder("parquet "+d.target, run.Version, v); err != nil {
				return err
			}
		}
	}
	// Stage checked this; a file dropped into the target since must not be
	// swapped out and deleted.
	if err := checkOwned(d.target, run.Job); err != nil {
		return err
	}
	_, statErr := os.Lstat(d.target)
	switch {
	case statErr == nil:
		err := exchangeDirs(d.staging, d.target)
		if err == nil {
			// staging now holds the previous run.
			if err := syncDir(d.parent); err != nil {
				return fmt.Errorf("parquet: publish %s: %w", d.target, err)
			}
			cleanUp(d.staging)
			return nil
		}
		if !errors.Is(err, errNoExchange) {
			return fmt.Errorf("parquet: publish %s: swap with %s: %w", d.target, d.staging, err)
		}
		// Two renames: readers may briefly find no directory, never a mix.
		if err := removeOwned(d.old); err != nil {
			return fmt.Errorf("parquet: publish %s: clear %s: %w", d.target, d.old, err)
		}
		if err := os.Rename(d.target, d.old); err != nil {
			return fmt.Errorf("parquet: publish %s: move previous run aside: %w", d.target, err)
		}
	case !errors.Is(statErr, fs.ErrNotExist):
		return fmt.Errorf("parquet: publish: %w", statErr)
	}
	if err := os.Rename(d.staging, d.target); err != nil {
		return fmt.Errorf("parquet: publish %s: rename %s: %w", d.target, d.staging, err)
	}
	if err := syncDir(d.parent); err != nil {
		return fmt.Errorf("parquet: publish %s: %w", d.target, err)
	}
	cleanUp(d.old)
	return nil
}

// cleanUp removes swapped-out runs after a publish, which has happened by
// then: what cannot go (a file precog did not write) is logged and left.
func cleanUp(dirs ...string) {
	for _, dir := range dirs {
		if err := removeOwned(dir); err != nil {
			slog.Warn("parquet: previous run left behind after publish", "dir", dir, "err", err)
		}
	}
}

// Abort removes the run's staging directory, file by precog file; a
// published run is untouched. A directory its publish moved aside goes too
// once the target exists again (while the target is missing it is the only
// copy of the previous run, and stays). A file precog did not write stays,
// and the error names it. It needs only the run's Job, Version and Params.
func (s *Sink) Abort(ctx context.Context, run sinks.RunInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, err := s.dirs(run)
	if err != nil {
		return err
	}
	if err := removeOwned(d.staging); err != nil {
		return fmt.Errorf("parquet: abort run %s version %s: %w", run.RunID, run.Version, err)
	}
	if _, err := os.Lstat(d.target); err == nil {
		if err := removeOwned(d.old); err != nil {
			return fmt.Errorf("parquet: abort run %s version %s: %w", run.RunID, run.Version, err)
		}
	}
	return nil
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
