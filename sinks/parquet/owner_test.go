package parquet

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
	"github.com/precog-ml/precog/sinks/sinktest"
)

// tree maps every path under root (relative) to its content ("<dir>" for
// directories): what a test compares to prove nothing was touched.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			out[rel] = "<dir>"
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			dst, err := os.Readlink(p)
			out[rel] = "-> " + dst
			return err
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, root string, before map[string]string) {
	t.Helper()
	if after := tree(t, root); !maps.Equal(before, after) {
		t.Fatalf("%s changed:\nbefore %v\nafter  %v", root, before, after)
	}
}

func wantNotOwned(t *testing.T, what string, err error, inMsg ...string) {
	t.Helper()
	var ne *sinks.NotOwnedError
	if !errors.As(err, &ne) {
		t.Fatalf("%s = %v, want a *sinks.NotOwnedError", what, err)
	}
	if ne.Hint == "" {
		t.Fatalf("%s: NotOwnedError without a hint: %v", what, err)
	}
	for _, s := range inMsg {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%s = %q, want it to mention %q", what, err, s)
		}
	}
}

// userDir makes root/data, a directory a user keeps files in.
func userDir(t *testing.T) (root, dir string) {
	root = t.TempDir()
	dir = filepath.Join(root, "data")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"important.txt": "keep me", "sub/notes.md": "mine", "part-00000.parquet": "not precog's"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, dir
}

// TestUserDirRefused: a directory precog did not publish is refused by
// every step that could write it, and nothing beside or inside it changes.
func TestUserDirRefused(t *testing.T) {
	ctx := context.Background()
	root, dir := userDir(t)
	before := tree(t, root)
	s := newSink(t, jobs.ParquetSinkSpec{Path: dir})
	run := sinktest.NewRun("v1", false, nil)

	wantNotOwned(t, "Check", s.Check(ctx), dir, "important.txt", "new or empty directory")
	wantNotOwned(t, "Prepare", s.Prepare(ctx, run), "important.txt")
	_, err := s.Lock(ctx, run, sinks.ThisProcess(run))
	wantNotOwned(t, "Lock", err)
	sameTree(t, root, before)

	// Even with shards written behind Prepare's back, Stage and Publish
	// refuse, and Abort removes only what precog wrote.
	commitShard(t, s, run, 0, 2)
	err = s.Stage(ctx, run, []sinks.CommittedShard{{Index: 0, Rows: 2}})
	wantNotOwned(t, "Stage", err)
	if err := s.Publish(ctx, run); err == nil {
		t.Fatal("Publish into a user's directory succeeded")
	}
	if err := s.Abort(ctx, run); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	sameTree(t, root, before)
}

// TestParamDotRefused is issue #11: --param date=. turns out/{{.date}} into
// out itself, which holds every earlier date; the run is refused instead of
// replacing it.
func TestParamDotRefused(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	spec := jobs.ParquetSinkSpec{Path: filepath.Join(root, "out", "{{.date}}")}
	s := newSink(t, spec)
	day := sinktest.NewRun("v1", false, map[string]string{"date": "2024-11-01"})
	writeRun(t, s, day, 10)
	if err := s.Publish(ctx, day); err != nil {
		t.Fatal(err)
	}
	before := tree(t, root)

	dot := sinktest.NewRun("v2", false, map[string]string{"date": "."})
	wantNotOwned(t, "Prepare(date=.)", s.Prepare(ctx, dot), filepath.Join(root, "out"))
	_, err := s.Lock(ctx, dot, sinks.ThisProcess(dot))
	wantNotOwned(t, "Lock(date=.)", err)
	// What validate sees once the template is rendered at load.
	rendered := newSink(t, jobs.ParquetSinkSpec{Path: filepath.Join(root, "out", ".")})
	wantNotOwned(t, "Check(out/.)", rendered.Check(ctx), "2024-11-01")
	sameTree(t, root, before)
	expectDir(t, filepath.Join(root, "out", "2024-11-01"), day, 10)
}

func TestEmptyOrNewDirAccepted(t *testing.T) {
	ctx := context.Background()
	for _, exists := range []bool{true, false} {
		target := filepath.Join(t.TempDir(), "a", "recs")
		if exists {
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		s := newSink(t, jobs.ParquetSinkSpec{Path: target})
		if err := s.Check(ctx); err != nil {
			t.Fatalf("Check (exists %v): %v", exists, err)
		}
		run := sinktest.NewRun("v1", false, nil)
		writeRun(t, s, run, 3)
		if err := s.Publish(ctx, run); err != nil {
			t.Fatalf("Publish (exists %v): %v", exists, err)
		}
		expectDir(t, target, run, 3)
		onlyTarget(t, target)
	}
}

// TestOtherJobRefused: a directory another job published is that job's.
func TestOtherJobRefused(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	theirs := sinktest.NewRun("v1", false, nil)
	theirs.Job = "other-job"
	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	writeRun(t, s, theirs, 4)
	if err := s.Publish(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	before := tree(t, target)

	mine := sinktest.NewRun("v2", false, nil)
	wantNotOwned(t, "Check", s.Check(ctx), `job "other-job"`)
	wantNotOwned(t, "Prepare", s.Prepare(ctx, mine), `job "other-job"`)
	_, err := s.Lock(ctx, mine, sinks.ThisProcess(mine))
	wantNotOwned(t, "Lock", err)
	sameTree(t, target, before)
	onlyTarget(t, target)
}

// TestSameJobReplaced: the job's own earlier run is replaced, and the
// marker names the run that replaced it.
func TestSameJobReplaced(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	for i, v := range []string{"v1", "v2"} {
		run := sinktest.NewRun(v, false, nil)
		if i > 0 {
			if err := s.Check(ctx); err != nil {
				t.Fatalf("Check of the job's own directory: %v", err)
			}
		}
		writeRun(t, s, run, 5+i)
		if err := s.Publish(ctx, run); err != nil {
			t.Fatal(err)
		}
		expectDir(t, target, run, 5+i)
		onlyTarget(t, target)
		m, err := ReadMarker(target)
		if err != nil {
			t.Fatal(err)
		}
		if m.Job != testJob || m.Version != v || m.RunID != run.RunID || !slices.Contains(m.Files, "part-<NNNNN>.parquet") {
			t.Fatalf("marker = %+v, want job %s version %s and precog's file names", m, testJob, v)
		}
	}
}

// TestPublishedBeforeMarkers: a directory an earlier precog published for
// the job (_SUCCESS, part files, no marker) is the job's; one holding
// anything else is not.
func TestPublishedBeforeMarkers(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	run1 := sinktest.NewRun("v1", false, nil)
	writeRun(t, s, run1, 5)
	if err := s.Publish(ctx, run1); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(target, MarkerFile)); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check of a pre-marker directory of the job: %v", err)
	}
	other := newSink(t, jobs.ParquetSinkSpec{Path: target})
	other.job = "other-job"
	wantNotOwned(t, "Check by another job", other.Check(ctx), MarkerFile)

	if err := os.WriteFile(filepath.Join(target, "readme"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantNotOwned(t, "Check with a foreign file", s.Check(ctx), "readme")
	if err := os.Remove(filepath.Join(target, "readme")); err != nil {
		t.Fatal(err)
	}
	run2 := sinktest.NewRun("v2", false, nil)
	writeRun(t, s, run2, 6)
	if err := s.Publish(ctx, run2); err != nil {
		t.Fatal(err)
	}
	expectDir(t, target, run2, 6)
	onlyTarget(t, target)
}

func TestNotADirectoryRefused(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	file := filepath.Join(root, "recs")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(root, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	before := tree(t, root)
	for path, why := range map[string]string{file: "is a file", link: "symbolic link"} {
		s := newSink(t, jobs.ParquetSinkSpec{Path: path})
		wantNotOwned(t, "Check "+path, s.Check(ctx), why)
		wantNotOwned(t, "Prepare "+path, s.Prepare(ctx, sinktest.NewRun("v1", false, nil)), why)
	}
	sameTree(t, root, before)
}

// TestForeignFileInOwnedDirKept: a file a user drops into a published
// directory is never deleted: the next run is refused until it is moved.
func TestForeignFileInOwnedDirKept(t *testing.T) {
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "recs")
	s := newSink(t, jobs.ParquetSinkSpec{Path: target})
	run1 := sinktest.NewRun("v1", false, nil)
	writeRun(t, s, run1, 5)
	if err := s.Publish(ctx, run1); err != nil {
		t.Fatal(err)
	}
	notes := filepath.Join(target, "notes.txt")
	if err := os.WriteFile(notes, []byte("analysis"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantNotOwned(t, "Check", s.Check(ctx), "notes.txt")
	run2 := sinktest.NewRun("v2", false, nil)
	wantNotOwned(t, "Prepare", s.Prepare(ctx, run2), "notes.txt")

	// The file appears after Prepare: Stage refuses.
	if err := os.Remove(notes); err != nil {
		t.Fatal(err)
	}
	writeShard0(t, s, run2, 7)
	if err := os.WriteFile(notes, []byte("analysis"), 0o644); err != nil {
		t.Fatal(err)
	}
	committed := []sinks.CommittedShard{{Index: 0, Rows: 7}}
	wantNotOwned(t, "Stage", s.Stage(ctx, run2, committed), "notes.txt")

	// The file appears after Stage: Publish refuses.
	if err := os.Remove(notes); err != nil {
		t.Fatal(err)
	}
	if err := s.Stage(ctx, run2, committed); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notes, []byte("analysis"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantNotOwned(t, "Publish", s.Publish(ctx, run2), "notes.txt")
	expectDirWith(t, target, run1, 5, "notes.txt")

	// Moved out, the run publishes.
	if err := os.Remove(notes); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx, run2); err != nil {
		t.Fatal(err)
	}
	expectDir(t, target, run2, 7)
	onlyTarget(t, target)
}

// expectDirWith checks target's version and row count by its files, while
// it also holds the foreign file extra (which readDir refuses).
func expectDirWith(t *testing.T, target string, run sinks.RunInfo, n int, extra string) {
	t.Helper()
	m, err := ReadMarker(target)
	if err != nil || m.Version != run.Version {
		t.Fatalf("%s holds %+v (%v), want version %s", target, m, err, run.Version)
	}
	if _, err := os.Stat(filepath.Join(target, extra)); err != nil {
		t.Fatalf("%s was deleted: %v", extra, err)
	}
	rows, err := footerRows(filepath.Join(target, partName(0)))
	if err != nil || rows != int64(n) {
		t.Fatalf("%s: %d rows (%v), want %d", target, rows, err, n)
	}
}

// TestCleanupKeepsForeignFiles: a file that lands in the old run's
// directory in the instant before the swap stays where the old run was
// moved; only precog's files go.
func TestCleanupKeepsForeignFiles(t *testing.T) {
	ctx := context.Background()
	for _, withExchange := range []bool{true, false} {
		target := filepath.Join(t.TempDir(), "recs")
		s := newSink(t, jobs.ParquetSinkSpec{Path: target, Retain: 1})
		run1, run2 := sinktest.NewRun("v1", false, nil), sinktest.NewRun("v2", false, nil)
		writeRun(t, s, run1, 5)
		if err := s.Publish(ctx, run1); err != nil {
			t.Fatal(err)
		}
		writeRun(t, s, run2, 6)
		exchangeDirs = func(a, b string) error {
			if err := os.WriteFile(filepath.Join(b, "late.txt"), []byte("x"), 0o644); err != nil {
				return err
			}
			if !withExchange {
				return errNoExchange
			}
			return exchange(a, b)
		}
		err := s.Publish(ctx, run2)
		exchangeDirs = exchange
		if err != nil {
			t.Fatalf("Publish (exchange %v): %v", withExchange, err)
		}
		expectDir(t, target, run2, 6)
		// The previous run was retired into the versions directory and
		// removed there (retain 1), precog's files only.
		left := filepath.Join(versionsDir(target), "v1")
		if got := tree(t, left); !maps.Equal(got, map[string]string{".": "<dir>", "late.txt": "x"}) {
			t.Fatalf("exchange %v: %s holds %v, want late.txt alone", withExchange, left, got)
		}
	}
}

// TestAbortKeepsForeignFiles: Abort deletes precog's files from staging,
// never a file someone else put there, and says so.
func TestAbortKeepsForeignFiles(t *testing.T) {
	ctx := context.Background()
	s := newSink(t, jobs.ParquetSinkSpec{Path: filepath.Join(t.TempDir(), "recs")})
	run := sinktest.NewRun("v1", false, nil)
	writeShard0(t, s, run, 3)
	d, _ := s.dirs(run)
	keep := filepath.Join(d.staging, "keep.txt")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := s.Abort(ctx, run)
	if err == nil || !strings.Contains(err.Error(), "keep.txt") {
		t.Fatalf("Abort = %v, want an error naming keep.txt", err)
	}
	if got := tree(t, d.staging); !maps.Equal(got, map[string]string{".": "<dir>", "keep.txt": "x"}) {
		t.Fatalf("staging after Abort holds %v, want keep.txt alone", got)
	}
}

// TestCheckCannotCreate: validate reports a target that cannot be created,
// naming the directory in the way.
func TestCheckCannotCreate(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	file := filepath.Join(root, "plain")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, jobs.ParquetSinkSpec{Path: filepath.Join(file, "out", "recs")})
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), file+" is not a directory") {
		t.Fatalf("Check under a file = %v, want an error naming %s", err, file)
	}
	if os.Geteuid() == 0 {
		t.Skip("root may write anywhere: the read-only case cannot be observed")
	}
	ro := filepath.Join(root, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	s = newSink(t, jobs.ParquetSinkSpec{Path: filepath.Join(ro, "out", "recs")})
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "cannot create it in "+ro) {
		t.Fatalf("Check under a read-only dir = %v, want an error naming %s", err, ro)
	}
}

// TestRemoveOwnedWhileAWriterFinishes: a shard attempt that lands a file
// between the cleanup's listing and its removal of the directory (an abort
// while other workers still write) does not fail the abort: the listing
// runs again and takes the new file too.
func TestRemoveOwnedWhileAWriterFinishes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), ".staging")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, partName(0)), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	late := 0
	beforeRemoveDir = func(d string) {
		if late < 3 { // three attempts land one file each, one per listing
			late++
			if err := os.WriteFile(filepath.Join(d, partName(late)), []byte("x"), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	defer func() { beforeRemoveDir = nil }()
	if err := removeOwned(dir); err != nil {
		t.Fatalf("removeOwned with a writer finishing: %v", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s still there (%v)", dir, err)
	}
	if late != 3 {
		t.Fatalf("the writer landed %d files, want 3", late)
	}
}
