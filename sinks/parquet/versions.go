package parquet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// Earlier published versions, kept for precog rollback, live beside the
// target, one directory per version, each exactly as it was published
// (part files, _SUCCESS, _PRECOG):
//
//	out/recs/date=2024-11-01/                                    current: where readers look
//	out/recs/.date=2024-11-01.precog.versions/<version>/         retained earlier versions
//
// A publish swaps staging with the target, then moves what it swapped out
// (the previous version) into the versions directory and removes versions
// beyond retention (sinks.Retained: the current one and the retain-1
// newest others). A rollback swaps a retained version with the target in
// one atomic rename and moves the one it swapped out into the versions
// directory. A directory's marker, not its name, says which version it
// holds: a crash between the swap and the move leaves a directory named
// for the other version, which settle renames (or retires) on the next
// publish, rollback or gc. Only directories precog published for the job
// are moved or removed, file by precog file (owner.go).

// versionsSuffix names the versions directory beside the target.
const versionsSuffix = ".precog.versions"

func versionsDir(target string) string {
	return filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+versionsSuffix)
}

// retainedDirs lists the versions directory: version → directory, by
// each directory's marker; directories of other jobs, unreadable ones and
// anything else are left out (and left alone).
func retainedDirs(target, job string) (map[string]string, error) {
	vdir := versionsDir(target)
	names, err := readNames(vdir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("parquet: list %s: %w", vdir, err)
	}
	slices.Sort(names)
	out := map[string]string{}
	for _, n := range names {
		p := filepath.Join(vdir, n)
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue
		}
		v, ok := publishedVersion(p, job)
		if !ok || v == "" {
			continue
		}
		if prev, dup := out[v]; !dup || filepath.Base(prev) != v {
			out[v] = p // a directory named for its version wins over a misnamed duplicate
		}
	}
	return out, nil
}

// settle finishes what a publish or rollback cut short: versions-directory
// entries named for another version than they hold are renamed (or
// removed when that version is there already), and a previous version
// left in a staging or moved-aside directory after its swap is retired
// into the versions directory. Called under the target's lease.
func (s *Sink) settle(target, job string) error {
	vdir := versionsDir(target)
	names, err := readNames(vdir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("parquet: list %s: %w", vdir, err)
	}
	for _, n := range names {
		p := filepath.Join(vdir, n)
		v, ok := publishedVersion(p, job)
		if !ok || v == "" || v == n {
			continue
		}
		if err := s.retire(target, job, p); err != nil {
			return err
		}
	}
	parent, base := filepath.Dir(target), filepath.Base(target)
	names, err = readNames(parent)
	if err != nil {
		return fmt.Errorf("parquet: list %s: %w", parent, err)
	}
	_, statErr := os.Lstat(target)
	for _, n := range names {
		p := filepath.Join(parent, n)
		rest, ok := strings.CutPrefix(n, "."+base+".precog-")
		if !ok {
			continue
		}
		v, published := publishedVersion(p, job)
		switch {
		case !published:
			continue
		case strings.HasPrefix(rest, "old-") && statErr == nil:
			// the previous version moved aside by a publish without
			// RENAME_EXCHANGE, once the target is back
		case !strings.HasPrefix(rest, "old-") && v != rest:
			// a staging directory after its swap: it holds the previous version
		default:
			continue
		}
		if err := s.retire(target, job, p); err != nil {
			return err
		}
	}
	return nil
}

// retire moves dir, a version precog published for job, into the versions
// directory under its version's name; when that version is there already
// or is the target's, dir is a duplicate and is removed.
func (s *Sink) retire(target, job, dir string) error {
	v, ok := publishedVersion(dir, job)
	if !ok || v == "" {
		return nil
	}
	vdir := versionsDir(target)
	dst := filepath.Join(vdir, v)
	cur, _ := publishedVersion(target, job)
	if _, err := os.Lstat(dst); err == nil || cur == v {
		if err := removeOwned(dir); err != nil {
			return fmt.Errorf("parquet: remove duplicate of version %s: %w", v, err)
		}
		return nil
	}
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return fmt.Errorf("parquet: keep version %s: %w", v, err)
	}
	if err := os.Rename(dir, dst); err != nil {
		return fmt.Errorf("parquet: keep version %s: move %s: %w", v, dir, err)
	}
	if err := syncDir(vdir); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// prune removes retained versions beyond retention, file by precog file;
// what cannot go (a file precog did not write) is logged and left.
func (s *Sink) prune(target, job string) error {
	dirs, err := retainedDirs(target, job)
	if err != nil {
		return err
	}
	cur, _ := publishedVersion(target, job)
	all := slices.Collect(mapsKeys(dirs))
	if cur != "" {
		all = append(all, cur)
	}
	_, drop := sinks.Retained(all, cur, s.retain)
	var errs []error
	for _, v := range drop {
		if err := removeOwned(dirs[v]); err != nil {
			slog.Warn("parquet: version beyond retention left behind", "dir", dirs[v], "err", err)
			errs = append(errs, err)
			continue
		}
		slog.Info("parquet: version beyond retention removed", "target", target, "version", v)
	}
	return errors.Join(errs...)
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Versions implements sinks.Rollbacker: the current version and those
// retained, newest first.
func (s *Sink) Versions(ctx context.Context, run sinks.RunInfo) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	target, err := s.Target(run)
	if err != nil {
		return nil, err
	}
	dirs, err := retainedDirs(target, run.Job)
	if err != nil {
		return nil, err
	}
	vs := slices.Collect(mapsKeys(dirs))
	if cur, ok := publishedVersion(target, run.Job); ok && cur != "" && dirs[cur] == "" {
		vs = append(vs, cur)
	}
	slices.SortFunc(vs, jobs.NewestVersionFirst)
	return vs, nil
}

// Current implements sinks.Rollbacker: the version in the target
// directory ("" when none is published).
func (s *Sink) Current(ctx context.Context, run sinks.RunInfo) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	target, err := s.Target(run)
	if err != nil {
		return "", err
	}
	v, ok := publishedVersion(target, run.Job)
	if !ok {
		return "", nil
	}
	return v, nil
}

// Rollback implements sinks.Rollbacker: it swaps the retained version
// with the target in one atomic rename (readers see the one or the other),
// then keeps the version it swapped out among the retained ones. The
// caller holds the target's lease (fenced before the swap).
func (s *Sink) Rollback(ctx context.Context, run sinks.RunInfo, version string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	target, err := s.Target(run)
	if err != nil {
		return err
	}
	if err := s.fence(target, run); err != nil {
		return err
	}
	if err := s.settle(target, run.Job); err != nil {
		return err
	}
	cur, _ := publishedVersion(target, run.Job)
	if cur == version {
		return nil
	}
	dirs, err := retainedDirs(target, run.Job)
	if err != nil {
		return err
	}
	src, ok := dirs[version]
	if !ok {
		vs, _ := s.Versions(ctx, run)
		return fmt.Errorf("parquet: rollback of %s: version %q is not retained (retained, newest first: %s)", target, version, strings.Join(vs, ", "))
	}
	if err := checkOwned(target, run.Job); err != nil {
		return err
	}
	if err := s.fence(target, run); err != nil {
		return err
	}
	if err := s.swapIn(src, target, cur); err != nil {
		return fmt.Errorf("parquet: rollback of %s to %s: %w", target, version, err)
	}
	slog.Info("parquet rolled back", "target", target, "version", version, "from", cur)
	// src now holds cur (or nothing, when no version was current).
	if err := s.retire(target, run.Job, src); err != nil {
		slog.Warn("parquet: the version rolled back from stays under another name until the next publish", "dir", src, "err", err)
	}
	return nil
}

// swapIn makes dir the target in one atomic exchange; where the
// filesystem lacks RENAME_EXCHANGE, the target (version cur) is moved
// aside first and readers may briefly find no directory, never a mix.
// Afterwards dir holds what the target held (nothing when it was absent).
func (s *Sink) swapIn(dir, target, cur string) error {
	parent := filepath.Dir(target)
	if _, err := os.Lstat(target); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(dir, target); err != nil {
			return err
		}
		return syncDir(parent)
	}
	err := exchangeDirs(dir, target)
	if err == nil {
		if err := syncDir(parent); err != nil {
			return err
		}
		return syncDir(filepath.Dir(dir))
	}
	if !errors.Is(err, errNoExchange) {
		return fmt.Errorf("swap %s with %s: %w", dir, target, err)
	}
	aside := filepath.Join(parent, "."+filepath.Base(target)+".precog-old-"+cur)
	if err := removeOwned(aside); err != nil {
		return fmt.Errorf("clear %s: %w", aside, err)
	}
	if err := os.Rename(target, aside); err != nil {
		return fmt.Errorf("move the current version aside: %w", err)
	}
	if err := os.Rename(dir, target); err != nil {
		return fmt.Errorf("rename %s: %w", dir, err)
	}
	if err := syncDir(parent); err != nil {
		return err
	}
	return os.Rename(aside, dir)
}
