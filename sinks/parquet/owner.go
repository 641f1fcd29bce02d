package parquet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/precog-ml/precog/sinks"
)

// The ownership rule: precog replaces or cleans only what it published
// itself. A directory it published holds MarkerFile naming the job; precog
// deletes only the file names it writes (PrecogFiles), never an unknown tree.

// MarkerFile marks a directory precog published; it holds a Marker as JSON.
// It is swapped into place with the run's content, so a directory holding
// it was published whole by precog.
const MarkerFile = "_PRECOG"

// PrecogFiles are the patterns of every file name precog writes into a run
// directory (recorded in the marker, so an operator can tell them apart).
var PrecogFiles = []string{"part-<NNNNN>.parquet", "part-<NNNNN>.parquet.tmp-<hex>", SuccessFile, MarkerFile, SuccessFile + ".tmp", MarkerFile + ".tmp"}

// Marker is the content of MarkerFile: which job owns the directory and
// which run it holds.
type Marker struct {
	Job     string   `json:"job"`
	RunID   string   `json:"run_id"`
	Version string   `json:"version"`
	Files   []string `json:"files"`
}

var (
	partRe = regexp.MustCompile(`^part-([0-9]{5,})\.parquet$`)
	tempRe = regexp.MustCompile(`^part-[0-9]{5,}\.parquet\.tmp-[0-9a-f]{16}$`)
)

// partName is the committed file of shard index.
func partName(index int) string { return fmt.Sprintf("part-%05d.parquet", index) }

// partIndex returns the shard index of a committed part file name.
func partIndex(name string) (int, bool) {
	m := partRe.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	i, err := strconv.Atoi(m[1])
	return i, err == nil
}

// isTemp reports whether name is an attempt's temporary file.
func isTemp(name string) bool { return tempRe.MatchString(name) }

// isPrecogFile reports whether precog writes files named name into a run
// directory: the only names cleanup may delete.
func isPrecogFile(name string) bool {
	switch name {
	case SuccessFile, MarkerFile, SuccessFile + ".tmp", MarkerFile + ".tmp":
		return true
	}
	return partRe.MatchString(name) || isTemp(name)
}

// ReadMarker reads dir/_PRECOG. The error wraps fs.ErrNotExist when dir
// holds none.
func ReadMarker(dir string) (Marker, error) {
	var m Marker
	p := filepath.Join(dir, MarkerFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: %w", p, err)
	}
	return m, nil
}

// notOwned is the error for a target precog must leave alone.
func notOwned(target, why, hint string) error {
	return &sinks.NotOwnedError{Sink: "parquet", Target: target, Hint: why + "; " + hint}
}

const hintChoose = "choose a new or empty directory for sinks.parquet.path, or remove the files yourself if they may go"

// checkOwned returns nil when job may replace target: it does not exist, is
// an empty directory, or is a directory precog published for job holding
// only precog's files. Otherwise a *sinks.NotOwnedError says why. It
// changes nothing.
func checkOwned(target, job string) error {
	fi, err := os.Lstat(target)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return nil // nothing there to own; creating it fails on its own
	}
	if err != nil {
		return fmt.Errorf("parquet: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return notOwned(target, "it is a symbolic link (precog replaces the directory entry itself)", "point sinks.parquet.path at the real directory, or at a new one")
	}
	if !fi.IsDir() {
		return notOwned(target, "it is a file, not a directory", hintChoose)
	}
	names, err := readNames(target)
	if err != nil {
		return fmt.Errorf("parquet: %w", err)
	}
	if len(names) == 0 {
		return nil
	}
	m, err := ReadMarker(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if !publishedBefore(target, job, names) {
			return notOwned(target, fmt.Sprintf("it holds %s and no %s marker", sample(names), MarkerFile), hintChoose)
		}
	case err != nil:
		return notOwned(target, fmt.Sprintf("its %s marker is unreadable (%v)", MarkerFile, err), hintChoose)
	case m.Job != job:
		return notOwned(target, fmt.Sprintf("job %q published it (run %s), not job %q", m.Job, m.RunID, job), "give each job its own sinks.parquet.path")
	}
	if foreign := foreignNames(names); len(foreign) > 0 {
		return notOwned(target, fmt.Sprintf("precog published it, but %s in it was not written by precog and would be deleted with the directory", sample(foreign)), "move those files out of the directory, then run again")
	}
	return nil
}

// publishedBefore accepts a directory an earlier precog (before MarkerFile)
// published for job: its _SUCCESS names job and it holds only precog's files.
func publishedBefore(dir, job string, names []string) bool {
	succ, err := ReadSuccess(dir)
	return err == nil && succ.Job == job && len(foreignNames(names)) == 0
}

// foreignNames are the names among names that precog does not write.
func foreignNames(names []string) []string {
	var out []string
	for _, n := range names {
		if !isPrecogFile(n) {
			out = append(out, n)
		}
	}
	return out
}

// sample names a few of names for a message.
func sample(names []string) string {
	const show = 3
	s := slices.Clone(names)
	slices.Sort(s)
	if len(s) > show {
		return fmt.Sprintf("%s and %d more", strings.Join(s[:show], ", "), len(s)-show)
	}
	return strings.Join(s, ", ")
}

func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// foreignError: cleanup found files precog did not write and left them.
type foreignError struct {
	Dir   string
	Names []string
}

func (e *foreignError) Error() string {
	return fmt.Sprintf("%s holds %s, which precog did not write; left in place (remove or move them yourself)", e.Dir, sample(e.Names))
}

// removeOwned deletes dir if it holds only precog's files: those are
// removed one by one, then the empty directory. Anything else stays, with
// dir, and is reported as a *foreignError. A missing dir is fine.
//
// A shard attempt still finishing (an abort while other workers write)
// may add a file between the listing and the removal of the directory:
// then it lists again, at most removeRounds times, rather than fail the
// abort with "directory not empty".
func removeOwned(dir string) error {
	for round := 1; ; round++ {
		err := removeOwnedOnce(dir)
		if !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) || round == removeRounds {
			return err
		}
	}
}

// removeRounds bounds removeOwned's listings: a shard attempt writes one
// temporary file and renames it, and stops once it sees its run ended.
const removeRounds = 100

// beforeRemoveDir, when a test sets it, runs between the listing and the
// removal of the directory: where a concurrent writer's file lands.
var beforeRemoveDir func(dir string)

func removeOwnedOnce(dir string) error {
	if fi, err := os.Lstat(dir); err == nil && !fi.IsDir() {
		// A symlink or file by a precog name: precog made neither.
		return &foreignError{Dir: filepath.Dir(dir), Names: []string{filepath.Base(dir)}}
	}
	names, err := readNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	// _SUCCESS and the marker go first: a reader still holding the old
	// directory then finds it incomplete and retries, never a version that
	// lost part of its files.
	slices.SortStableFunc(names, func(a, b string) int {
		return boolRank(b == SuccessFile || b == MarkerFile) - boolRank(a == SuccessFile || a == MarkerFile)
	})
	var foreign []string
	for _, n := range names {
		p := filepath.Join(dir, n)
		if !isPrecogFile(n) {
			foreign = append(foreign, n)
			continue
		}
		fi, err := os.Lstat(p)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err != nil {
			continue
		}
		if !fi.Mode().IsRegular() {
			foreign = append(foreign, n) // a precog name, but not what precog writes
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if len(foreign) > 0 {
		return &foreignError{Dir: dir, Names: foreign}
	}
	if beforeRemoveDir != nil {
		beforeRemoveDir(dir)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// writeMarker writes the marker and _SUCCESS of run into dir (staging).
func writeMarker(dir string, run sinks.RunInfo) error {
	m, err := json.Marshal(Marker{Job: run.Job, RunID: run.RunID, Version: run.Version, Files: PrecogFiles})
	if err != nil {
		return err
	}
	succ, err := json.Marshal(Success{Job: run.Job, RunID: run.RunID, Version: run.Version, PublishedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(dir, MarkerFile), m); err != nil {
		return err
	}
	return writeFileSync(filepath.Join(dir, SuccessFile), succ)
}

// Check implements sinks.Checker for `precog validate`: precog may replace
// the target (else a *sinks.NotOwnedError) and can create it (the nearest
// existing directory on its path is writable). It changes nothing. A path
// whose {{.param}} templates are still unrendered names no directory yet;
// Lock and Prepare check it per run.
func (s *Sink) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if strings.Contains(s.spec.Path, "{{") {
		return nil
	}
	target, err := s.Target(sinks.RunInfo{Job: s.job})
	if err != nil {
		return err
	}
	if err := checkOwned(target, s.job); err != nil {
		return err
	}
	dir := filepath.Dir(target)
	for {
		fi, err := os.Stat(dir)
		if err == nil && !fi.IsDir() {
			return fmt.Errorf("parquet: %s: %s is not a directory", target, dir)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) {
			return fmt.Errorf("parquet: %s: %w", target, err)
		}
		up := filepath.Dir(dir)
		if up == dir {
			break
		}
		dir = up
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return fmt.Errorf("parquet: %s: cannot create it in %s: %w", target, dir, err)
	}
	return nil
}
