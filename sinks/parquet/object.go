package parquet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/precog-ml/precog/internal/objstore"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// ObjectSink is the Parquet sink on object storage (sinks.parquet.path an
// s3://, gs:// or azblob:// URL). Object stores have no rename, so a run is
// never moved into place: each version is written under its own prefix and
// made current by one small pointer object. For target T and version V:
//
//	T/_PRECOG                            the pointer and owner marker: a Success naming the current V
//	T/_PRECOG.lock                       the writer lock (a lease, object_lock.go)
//	T/_versions/V/_PREPARED              written by Prepare: proves the bucket takes writes
//	T/_versions/V/part-00003.parquet     a committed shard (an upload replaces an earlier attempt)
//	T/_versions/V/_SUCCESS               written by Stage once every shard is verified
//
// Readers (and precog) read T/_PRECOG, then T/_versions/V/. Publish
// replaces only the pointer, in one PUT, so a reader sees the old version
// or the new one, never a mix; a version is never published before its
// _SUCCESS exists, so no reader sees a hole. Shard files are written to a
// local spool by the disk sink's writer, then uploaded whole.
type ObjectSink struct {
	job   string
	spec  jobs.ParquetSinkSpec
	local *Sink  // writes shard files into spool
	spool string // removed by Close

	mu    sync.Mutex
	locks map[string]*objectLock // held locks by target URL, for Publish's fencing
}

var _ sinks.Sink = (*ObjectSink)(nil)

// Object layout names, relative to the target prefix.
const (
	objectVersionsDir = "_versions"
	preparedFile      = "_PREPARED"
	lockSuffix        = ".lock"
	// maxPointerBytes bounds the pointer and lock objects read.
	maxPointerBytes = 1 << 16
)

// NewObject returns the object-storage sink of job for a spec whose path
// is a URL (it may hold {{.param}} templates).
func NewObject(job string, spec jobs.ParquetSinkSpec) (*ObjectSink, error) {
	if _, err := objstore.Parse(strings.ReplaceAll(strings.ReplaceAll(spec.Path, "{{", "x"), "}}", "x")); err != nil {
		return nil, fmt.Errorf("sinks.parquet.path: %w", err)
	}
	if strings.Contains(spec.Path, "{{") {
		if _, err := template.New("path").Option("missingkey=error").Parse(spec.Path); err != nil {
			return nil, fmt.Errorf("sinks.parquet.path %q: %w", spec.Path, err)
		}
	}
	spool, err := os.MkdirTemp("", "precog-parquet-spool-")
	if err != nil {
		return nil, fmt.Errorf("parquet: spool: %w", err)
	}
	local, err := New(job, jobs.ParquetSinkSpec{Path: spool + "/target", Compression: spec.Compression, Retain: spec.Retain})
	if err != nil {
		os.RemoveAll(spool)
		return nil, err
	}
	return &ObjectSink{job: job, spec: spec, local: local, spool: spool, locks: map[string]*objectLock{}}, nil
}

// Name is "parquet".
func (s *ObjectSink) Name() string { return "parquet" }

// Close removes the local spool.
func (s *ObjectSink) Close() error { return os.RemoveAll(s.spool) }

// objectTarget is a run's target: its bucket and key prefix (no trailing
// slash).
type objectTarget struct {
	b      *objstore.Bucket
	loc    objstore.Location
	prefix string
}

func (t objectTarget) url() string     { return t.loc.ObjectURL(t.prefix) }
func (t objectTarget) pointer() string { return t.prefix + "/" + MarkerFile }
func (t objectTarget) lock() string    { return t.prefix + "/" + MarkerFile + lockSuffix }
func (t objectTarget) version(v string) string {
	return t.prefix + "/" + objectVersionsDir + "/" + v + "/"
}
func (t objectTarget) part(v string, i int) string { return t.version(v) + partName(i) }

// versionTarget is target for a run that names a version.
func (s *ObjectSink) versionTarget(ctx context.Context, run sinks.RunInfo) (objectTarget, error) {
	if err := checkVersionName(run.RunID, run.Version); err != nil {
		return objectTarget{}, err
	}
	return s.target(ctx, run)
}

func checkVersionName(runID, v string) error {
	if v == "" || v == "." || v == ".." || strings.ContainsAny(v, `/\?*[`+"\x00") {
		return fmt.Errorf("parquet: run %s: version %q cannot name a prefix", runID, v)
	}
	return nil
}

// target renders the spec's path with the run's parameters.
func (s *ObjectSink) target(ctx context.Context, run sinks.RunInfo) (objectTarget, error) {
	p := s.spec.Path
	if strings.Contains(p, "{{") {
		tmpl, err := template.New("path").Option("missingkey=error").Parse(p)
		if err != nil {
			return objectTarget{}, fmt.Errorf("sinks.parquet.path %q: %w", p, err)
		}
		var b strings.Builder
		if err := tmpl.Execute(&b, run.Params); err != nil {
			return objectTarget{}, fmt.Errorf("sinks.parquet.path %q: %w", p, err)
		}
		p = b.String()
	}
	loc, err := objstore.Parse(p)
	if err != nil {
		return objectTarget{}, fmt.Errorf("sinks.parquet.path: %w", err)
	}
	prefix := strings.Trim(loc.Key, "/")
	if prefix == "" || objstore.HasGlob(prefix) {
		return objectTarget{}, fmt.Errorf("sinks.parquet.path %q: name a prefix under the bucket, without glob characters", p)
	}
	b, err := objstore.Open(ctx, loc)
	if err != nil {
		return objectTarget{}, fmt.Errorf("parquet sink: %w", err)
	}
	return objectTarget{b: b, loc: loc, prefix: prefix}, nil
}

// objectPointer is the content of T/_PRECOG: the current version, and the
// newest version ever published there (which orders publishes: after a
// rollback it is not the current one).
type objectPointer struct {
	Success
	Latest string `json:"latest,omitempty"`
}

// latest is the newest version published to the target.
func (p objectPointer) latest() string {
	if p.Latest != "" {
		return p.Latest
	}
	return p.Version
}

// readPointer returns the target's pointer; ok is false when none exists.
func readPointer(ctx context.Context, t objectTarget) (objectPointer, bool, error) {
	raw, err := t.b.ReadAll(ctx, t.pointer(), maxPointerBytes)
	if objstore.NotFound(err) {
		return objectPointer{}, false, nil
	}
	if err != nil {
		return objectPointer{}, false, fmt.Errorf("parquet sink: %w", err)
	}
	var p objectPointer
	if err := json.Unmarshal(raw, &p); err != nil || p.Version == "" {
		return objectPointer{}, false, fmt.Errorf("parquet sink: %s is not precog's pointer (%v)", t.loc.ObjectURL(t.pointer()), err)
	}
	return p, true, nil
}

// CurrentObject returns what readers of the target of run see: the
// pointer, and ok false when nothing is published.
func (s *ObjectSink) CurrentObject(ctx context.Context, run sinks.RunInfo) (Success, string, bool, error) {
	t, err := s.target(ctx, run)
	if err != nil {
		return Success{}, "", false, err
	}
	p, ok, err := readPointer(ctx, t)
	if err != nil || !ok {
		return p.Success, "", ok, err
	}
	return p.Success, t.loc.ObjectURL(t.version(p.Version)), true, nil
}

// checkOwnedObjects refuses a target precog did not create: a pointer of
// another job, or objects under the prefix without a pointer other than
// precog's own versions and lock.
func checkOwnedObjects(ctx context.Context, t objectTarget, job string) error {
	p, ok, err := readPointer(ctx, t)
	if err != nil {
		var nf *sinks.NotOwnedError
		if errors.As(err, &nf) {
			return err
		}
		if strings.Contains(err.Error(), "is not precog's pointer") {
			return &sinks.NotOwnedError{Sink: "parquet", Target: t.url(), Hint: "its _PRECOG object is not precog's; choose another prefix"}
		}
		return err
	}
	if ok {
		if p.Job != job {
			return &sinks.NotOwnedError{Sink: "parquet", Target: t.url(), Hint: fmt.Sprintf("job %q publishes there; choose another prefix", p.Job)}
		}
		return nil
	}
	foreign := ""
	errStop := errors.New("stop")
	err = t.b.List(ctx, t.prefix+"/", func(o objstore.Object) error {
		rel := strings.TrimPrefix(o.Key, t.prefix+"/")
		if strings.HasPrefix(rel, objectVersionsDir+"/") || rel == MarkerFile+lockSuffix {
			return nil
		}
		foreign = o.Key
		return errStop
	})
	if err != nil && !errors.Is(err, errStop) {
		return fmt.Errorf("parquet sink: %w", err)
	}
	if foreign != "" {
		return &sinks.NotOwnedError{Sink: "parquet", Target: t.url(), Hint: fmt.Sprintf("it holds %s; choose an empty or new prefix", t.loc.ObjectURL(foreign))}
	}
	return nil
}

// Prepare refuses a target precog does not own (nothing written then) and
// writes the version's _PREPARED object, so that a bucket refusing writes
// fails the run before anything is computed, naming the permission.
func (s *ObjectSink) Prepare(ctx context.Context, run sinks.RunInfo) error {
	if run.Schema == nil {
		return fmt.Errorf("parquet: run %s: no output schema", run.RunID)
	}
	t, err := s.versionTarget(ctx, run)
	if err != nil {
		return err
	}
	if err := checkOwnedObjects(ctx, t, run.Job); err != nil {
		return err
	}
	body, _ := json.Marshal(Success{Job: run.Job, RunID: run.RunID, Version: run.Version})
	if err := t.b.Write(ctx, t.version(run.Version)+preparedFile, bytes.NewReader(body), objstore.WriteOptions{ContentType: "application/json"}); err != nil {
		return writeRefused(t, err)
	}
	return nil
}

// writeRefused says what a failed write to the target needs.
func writeRefused(t objectTarget, err error) error {
	return fmt.Errorf("parquet sink: writing under %s failed (the credentials need write and delete permission on that prefix: s3:PutObject and s3:DeleteObject, roles/storage.objectUser, Storage Blob Data Contributor); nothing was published: %w", t.url(), err)
}

// Shard starts an attempt at shard index: the disk sink's writer into the
// spool; Commit uploads the finished file over the shard's object.
func (s *ObjectSink) Shard(ctx context.Context, run sinks.RunInfo, index int) (sinks.ShardWriter, error) {
	t, err := s.versionTarget(ctx, run)
	if err != nil {
		return nil, err
	}
	w, err := s.local.Shard(ctx, run, index)
	if err != nil {
		return nil, err
	}
	return &objectShard{shardWriter: w.(*shardWriter), t: t, key: t.part(run.Version, index)}, nil
}

type objectShard struct {
	*shardWriter
	t   objectTarget
	key string
}

// Commit finishes the local file and uploads it; the object appears whole
// or not at all, replacing an earlier attempt's.
func (w *objectShard) Commit(ctx context.Context) error {
	if err := w.shardWriter.Commit(ctx); err != nil {
		return err
	}
	defer os.Remove(w.final)
	f, err := os.Open(w.final)
	if err != nil {
		return fmt.Errorf("parquet: shard %d: %w", w.index, err)
	}
	defer f.Close()
	if err := w.t.b.Write(ctx, w.key, f, objstore.WriteOptions{}); err != nil {
		return fmt.Errorf("parquet: shard %d: %w", w.index, writeRefused(w.t, err))
	}
	return nil
}

// Stage verifies that every committed shard's object holds its rows (a
// *sinks.MissingError lists those that do not), removes part objects of
// shards not committed, and writes the version's _SUCCESS. Nothing becomes
// visible to readers.
func (s *ObjectSink) Stage(ctx context.Context, run sinks.RunInfo, committed []sinks.CommittedShard) error {
	t, err := s.versionTarget(ctx, run)
	if err != nil {
		return err
	}
	want := map[int]int64{}
	for _, c := range committed {
		want[c.Index] = c.Rows
	}
	present := map[int]string{}
	err = t.b.List(ctx, t.version(run.Version), func(o objstore.Object) error {
		if i, ok := partIndex(strings.TrimPrefix(o.Key, t.version(run.Version))); ok {
			present[i] = o.Key
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("parquet sink: %w", err)
	}
	var missing []int
	var reasons []string
	for _, c := range committed {
		key, ok := present[c.Index]
		if !ok {
			missing = append(missing, c.Index)
			reasons = append(reasons, fmt.Sprintf("%s missing", partName(c.Index)))
			continue
		}
		n, err := objectRows(ctx, t.b, key)
		if err != nil {
			return err
		}
		if n != c.Rows {
			missing = append(missing, c.Index)
			reasons = append(reasons, fmt.Sprintf("%s has %d of %d rows", partName(c.Index), n, c.Rows))
		}
	}
	if len(missing) > 0 {
		sort.Ints(missing)
		return &sinks.MissingError{Sink: "parquet", Shards: missing, Reason: strings.Join(reasons, ", ")}
	}
	for i, key := range present {
		if _, ok := want[i]; !ok {
			if err := t.b.Delete(ctx, key); err != nil {
				return fmt.Errorf("parquet sink: %w", err)
			}
		}
	}
	body, _ := json.Marshal(Success{Job: run.Job, RunID: run.RunID, Version: run.Version})
	if err := t.b.Write(ctx, t.version(run.Version)+SuccessFile, bytes.NewReader(body), objstore.WriteOptions{ContentType: "application/json"}); err != nil {
		return writeRefused(t, err)
	}
	return nil
}

// objectRows reads a part object's row count from its footer.
func objectRows(ctx context.Context, b *objstore.Bucket, key string) (n int64, err error) {
	r, _, err := b.OpenRange(ctx, key, nil)
	if err != nil {
		return 0, fmt.Errorf("parquet sink: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			n, err = 0, fmt.Errorf("parquet sink: %s: corrupt footer: %v", b.Location().ObjectURL(key), p)
		}
	}()
	pf, err := file.NewParquetReader(r)
	if err != nil {
		return 0, fmt.Errorf("parquet sink: %s: %w", b.Location().ObjectURL(key), err)
	}
	defer pf.Close()
	return pf.NumRows(), nil
}

// Publish makes the staged version current by replacing the pointer in one
// PUT. Idempotent; a version older than the current one is a
// *sinks.SupersededError; a version without _SUCCESS is refused (no holes);
// a lock of this sink on the target that was taken over fences it.
func (s *ObjectSink) Publish(ctx context.Context, run sinks.RunInfo) error {
	t, err := s.versionTarget(ctx, run)
	if err != nil {
		return err
	}
	cur, ok, err := readPointer(ctx, t)
	if err != nil {
		return err
	}
	if ok && (cur.Version == run.Version || cur.latest() == run.Version) {
		return nil // published: readers stay where they are (a rollback too)
	}
	if ok && cur.Job != run.Job {
		return &sinks.NotOwnedError{Sink: "parquet", Target: t.url(), Hint: fmt.Sprintf("job %q publishes there", cur.Job)}
	}
	if err := sinks.CheckPublishOrder("parquet", run.Version, cur.latest()); err != nil {
		return err
	}
	if _, err := t.b.Attributes(ctx, t.version(run.Version)+SuccessFile); err != nil {
		return fmt.Errorf("parquet sink: version %s of %s is not staged: %w", run.Version, t.url(), err)
	}
	if err := s.fenced(ctx, t); err != nil {
		return err
	}
	// Marked published before the pointer moves: a publish cut off between
	// the two leaves a retained version, never a current unmarked one.
	if err := t.b.Write(ctx, t.version(run.Version)+publishedFile, strings.NewReader(time.Now().UTC().Format(time.RFC3339)), objstore.WriteOptions{}); err != nil {
		return writeRefused(t, err)
	}
	if err := writePointer(ctx, t, run, run.Version, run.Version); err != nil {
		return err
	}
	// Old versions beyond retention go after the cutover; a failure here
	// leaves them for the next publish or precog gc.
	if err := gcVersions(ctx, t, run.Version, s.local.retain); err != nil {
		slog.Warn("parquet sink: removing old versions", "target", t.url(), "err", err)
	}
	return nil
}

// Abort removes every object of an unpublished version; a version that
// was published (current or retained) is kept.
func (s *ObjectSink) Abort(ctx context.Context, run sinks.RunInfo) error {
	t, err := s.versionTarget(ctx, run)
	if err != nil {
		return err
	}
	cur, ok, err := readPointer(ctx, t)
	if err != nil {
		return err
	}
	if ok && cur.Version == run.Version {
		return nil
	}
	if _, err := t.b.Attributes(ctx, t.version(run.Version)+publishedFile); err == nil {
		return nil // published once: a rollback target, gc's to remove
	}
	var keys []string
	if err := t.b.List(ctx, t.version(run.Version), func(o objstore.Object) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		return fmt.Errorf("parquet sink: %w", err)
	}
	for _, k := range keys {
		if err := t.b.Delete(ctx, k); err != nil {
			return fmt.Errorf("parquet sink: abort: %w", err)
		}
	}
	return nil
}
