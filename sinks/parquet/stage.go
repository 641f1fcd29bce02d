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

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/precog-ml/precog/sinks"
)

// Stage is phase one of the publish. It checks that precog may replace the
// target, verifies that staging holds every committed shard's part file
// with the row count the ledger recorded (a *sinks.MissingError lists all
// that do not), removes what must not be published (part files of shards
// not in committed, abandoned attempts), and writes the marker and
// _SUCCESS into staging, fsynced. The published directory is untouched.
// Idempotent; a run already published stages as nil.
func (s *Sink) Stage(ctx context.Context, run sinks.RunInfo, committed []sinks.CommittedShard) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, err := s.dirs(run)
	if err != nil {
		return err
	}
	if alreadyPublished(d.target, run) {
		return nil
	}
	if err := checkOwned(d.target, run.Job); err != nil {
		return err
	}
	if err := s.fence(d.target, run); err != nil {
		return err
	}
	if err := os.MkdirAll(d.staging, 0o755); err != nil {
		return fmt.Errorf("parquet: stage %s: %w", d.staging, err)
	}
	if err := sweepStaging(d.staging, committed); err != nil {
		return fmt.Errorf("parquet: stage run %s for %s: %w", run.RunID, d.target, err)
	}
	if err := verifyShards(ctx, d.staging, committed); err != nil {
		return err
	}
	if err := s.fence(d.target, run); err != nil {
		return err
	}
	if err := writeMarker(d.staging, run); err != nil {
		return fmt.Errorf("parquet: stage %s: %w", d.staging, err)
	}
	if err := syncDir(d.staging); err != nil {
		return fmt.Errorf("parquet: stage %s: %w", d.target, err)
	}
	return nil
}

// alreadyPublished reports whether run's version was published to target:
// it is current there, or retained (a rollback moved readers off it).
func alreadyPublished(target string, run sinks.RunInfo) bool {
	if published(target, run) {
		return true
	}
	dirs, err := retainedDirs(target, run.Job)
	return err == nil && dirs[run.Version] != ""
}

// published reports whether target already holds run (its marker, or for
// a directory published before markers its _SUCCESS, names run's version).
func published(target string, run sinks.RunInfo) bool {
	if m, err := ReadMarker(target); err == nil {
		return m.Job == run.Job && m.Version == run.Version
	}
	succ, err := ReadSuccess(target)
	return err == nil && succ.Job == run.Job && succ.Version == run.Version
}

// sweepStaging removes from staging the files that must not be published:
// abandoned attempts and part files of shards not in committed (leftovers
// of an attempt the ledger did not record). A file precog did not write
// fails the stage and stays.
func sweepStaging(dir string, committed []sinks.CommittedShard) error {
	names, err := readNames(dir)
	if err != nil {
		return err
	}
	want := make(map[int]bool, len(committed))
	for _, c := range committed {
		want[c.Index] = true
	}
	if foreign := foreignNames(names); len(foreign) > 0 {
		return &foreignError{Dir: dir, Names: foreign}
	}
	for _, n := range names {
		i, isPart := partIndex(n)
		if isPart && want[i] || n == SuccessFile || n == MarkerFile {
			continue // kept, or rewritten below
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// verifyShards checks each committed shard's part file in dir against its
// recorded row count, reporting every shard that is missing or short.
func verifyShards(ctx context.Context, dir string, committed []sinks.CommittedShard) error {
	var lost []int
	var why []string
	for _, c := range committed {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := partName(c.Index)
		rows, err := footerRows(filepath.Join(dir, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			why = append(why, name+" is missing")
		case err != nil:
			why = append(why, fmt.Sprintf("%s is unreadable (%v)", name, err))
		case rows != c.Rows:
			why = append(why, fmt.Sprintf("%s has %d of %d rows", name, rows, c.Rows))
		default:
			continue
		}
		lost = append(lost, c.Index)
	}
	if len(lost) == 0 {
		return nil
	}
	slices.Sort(lost)
	const show = 5
	if len(why) > show {
		why = append(why[:show], fmt.Sprintf("%d more", len(why)-show))
	}
	return &sinks.MissingError{Sink: "parquet", Shards: lost, Reason: "in " + dir + ": " + strings.Join(why, "; ")}
}

// footerRows is the row count a Parquet file's footer records.
func footerRows(path string) (int64, error) {
	if _, err := os.Stat(path); err != nil {
		return 0, err
	}
	r, err := file.OpenParquetFile(path, false)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	return r.NumRows(), nil
}
