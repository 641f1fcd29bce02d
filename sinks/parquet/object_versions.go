package parquet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/precog-ml/precog/internal/objstore"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/sinks"
)

// publishedFile marks a version that was made current once: it is a
// rollback target while retention keeps it.
const publishedFile = "_PUBLISHED"

var (
	_ sinks.Rollbacker = (*ObjectSink)(nil)
	_ sinks.Inventory  = (*ObjectSink)(nil)
)

// versionInfo is what the target holds of one version.
type versionInfo struct {
	version   string
	published bool
	objects   int
	bytes     int64
}

// listVersions lists the versions under T/_versions/, newest first.
func listVersions(ctx context.Context, t objectTarget) ([]versionInfo, error) {
	by := map[string]*versionInfo{}
	root := t.prefix + "/" + objectVersionsDir + "/"
	err := t.b.List(ctx, root, func(o objstore.Object) error {
		v, name, ok := strings.Cut(strings.TrimPrefix(o.Key, root), "/")
		if !ok {
			return nil
		}
		vi := by[v]
		if vi == nil {
			vi = &versionInfo{version: v}
			by[v] = vi
		}
		vi.objects++
		vi.bytes += o.Size
		if name == publishedFile {
			vi.published = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("parquet sink: %w", err)
	}
	out := make([]versionInfo, 0, len(by))
	for _, vi := range by {
		out = append(out, *vi)
	}
	slices.SortFunc(out, func(a, b versionInfo) int { return jobs.NewestVersionFirst(a.version, b.version) })
	return out, nil
}

// Versions lists the retained published versions, newest first.
func (s *ObjectSink) Versions(ctx context.Context, run sinks.RunInfo) ([]string, error) {
	t, err := s.target(ctx, run)
	if err != nil {
		return nil, err
	}
	vs, err := listVersions(ctx, t)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range vs {
		if v.published {
			out = append(out, v.version)
		}
	}
	return out, nil
}

// Current is the version the pointer names ("" when none).
func (s *ObjectSink) Current(ctx context.Context, run sinks.RunInfo) (string, error) {
	t, err := s.target(ctx, run)
	if err != nil {
		return "", err
	}
	p, _, err := readPointer(ctx, t)
	return p.Version, err
}

// Rollback points readers back at a retained published version, in one
// PUT of the pointer.
func (s *ObjectSink) Rollback(ctx context.Context, run sinks.RunInfo, version string) error {
	if err := checkVersionName(run.RunID, version); err != nil {
		return err
	}
	t, err := s.target(ctx, run)
	if err != nil {
		return err
	}
	if err := checkOwnedObjects(ctx, t, run.Job); err != nil {
		return err
	}
	if _, err := t.b.Attributes(ctx, t.version(version)+publishedFile); err != nil {
		return fmt.Errorf("parquet sink: %s does not retain version %s: %w", t.url(), version, err)
	}
	cur, _, err := readPointer(ctx, t)
	if err != nil {
		return err
	}
	if err := s.fenced(ctx, t); err != nil {
		return err
	}
	return writePointer(ctx, t, run, version, cur.latest())
}

// writePointer makes version current; latest is the newest version ever
// published to the target.
func writePointer(ctx context.Context, t objectTarget, run sinks.RunInfo, version, latest string) error {
	body, _ := json.Marshal(objectPointer{Success: Success{Job: run.Job, RunID: run.RunID, Version: version, PublishedAt: time.Now().UTC()}, Latest: latest})
	if err := t.b.Write(ctx, t.pointer(), bytes.NewReader(body), objstore.WriteOptions{ContentType: "application/json"}); err != nil {
		return writeRefused(t, err)
	}
	return nil
}

// Stored lists every version under the target (precog's objects only: the
// _versions/ prefix), the current and retained ones marked.
func (s *ObjectSink) Stored(ctx context.Context, run sinks.RunInfo) ([]sinks.StoredVersion, error) {
	t, err := s.target(ctx, run)
	if err != nil {
		return nil, err
	}
	p, _, err := readPointer(ctx, t)
	if err != nil {
		return nil, err
	}
	vs, err := listVersions(ctx, t)
	if err != nil {
		return nil, err
	}
	out := make([]sinks.StoredVersion, 0, len(vs))
	for _, v := range vs {
		cur := v.version == p.Version
		out = append(out, sinks.StoredVersion{Version: v.version, Current: cur, Published: cur || v.published,
			What: fmt.Sprintf("objects %s (%d objects, %s)", t.loc.ObjectURL(t.version(v.version)), v.objects, sizeText(v.bytes))})
	}
	return out, nil
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.1f kB", float64(n)/(1<<10))
	}
}

// gcVersions removes the published versions retention drops (sinks.Retained
// with sinks.parquet.retain: never the current one). Unpublished versions
// are a killed run's, removed by Abort or precog gc.
func gcVersions(ctx context.Context, t objectTarget, current string, retain int) error {
	vs, err := listVersions(ctx, t)
	if err != nil {
		return err
	}
	var published []string
	for _, v := range vs {
		if v.published || v.version == current {
			published = append(published, v.version)
		}
	}
	_, drop := sinks.Retained(published, current, retain)
	for _, v := range drop {
		if err := deleteVersion(ctx, t, v); err != nil {
			return err
		}
	}
	return nil
}

// deleteVersion removes every object of a version, its _PUBLISHED marker
// last, so that a gc cut off midway leaves a version still listed.
func deleteVersion(ctx context.Context, t objectTarget, version string) error {
	var keys []string
	if err := t.b.List(ctx, t.version(version), func(o objstore.Object) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		return fmt.Errorf("parquet sink: %w", err)
	}
	sort.SliceStable(keys, func(i, j int) bool {
		return !strings.HasSuffix(keys[i], "/"+publishedFile) && strings.HasSuffix(keys[j], "/"+publishedFile)
	})
	for _, k := range keys {
		if err := t.b.Delete(ctx, k); err != nil {
			return fmt.Errorf("parquet sink: %w", err)
		}
	}
	return nil
}
