package parquet

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/precog-ml/precog/internal/objstore"
)

// This file reads datasets on object storage (s3://, gs://, azblob://).
// Files are resolved by listing, as directories and globs are on disk; a
// file is opened by ranged reads (objstore.RangeReader): its footer with
// the last 64 KiB, then only the column chunks of the shard's row groups
// and projected columns, coalesced across small holes, several in flight.

// resolveObjects lists the Parquet objects path names, as resolve does on
// disk: the object itself, or every *.parquet object under a "directory"
// (skipping names that start with "_" or "." at any level below it), for
// a glob each match. It returns the bucket and object URLs, sorted.
func resolveObjects(ctx context.Context, raw string) (*objstore.Bucket, []string, error) {
	loc, err := objstore.Parse(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("parquet source: %w", err)
	}
	b, err := objstore.Open(ctx, loc)
	if err != nil {
		return nil, nil, fmt.Errorf("parquet source %q: %w", raw, err)
	}
	matches, err := b.MatchKeys(ctx, loc.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("parquet source %q: %w", raw, err)
	}
	seen := map[string]bool{}
	var files []string
	for _, m := range matches {
		if !wantedObject(m) || seen[m.Key] {
			continue
		}
		seen[m.Key] = true
		files = append(files, loc.ObjectURL(m.Key))
	}
	sort.Strings(files)
	return b, files, nil
}

// wantedObject applies the directory rules of resolve to one listed object.
func wantedObject(m objstore.Match) bool {
	if m.Self {
		return !hidden(path.Base(m.Key))
	}
	rel := m.Rel()
	for _, part := range strings.Split(rel, "/") {
		if part == "" || hidden(part) {
			return false
		}
	}
	return strings.HasSuffix(strings.ToLower(rel), ".parquet")
}

// objectKey is the key of an object URL of the source's bucket.
func (s *Source) objectKey(file string) (string, error) {
	prefix := s.bucket.Location().ObjectURL("")
	if !strings.HasPrefix(file, prefix) {
		return "", fmt.Errorf("%s is not in the source's bucket %s", file, prefix)
	}
	return strings.TrimPrefix(file, prefix), nil
}

// openObject opens an object for ranged reads under ctx and parses its
// footer; the fingerprint is the object's size, modification time and
// ETag as its metadata gives them.
//
// With the planned fingerprint (Open), the object's attributes come from
// the footer read itself: no metadata round trip before it.
func (s *Source) openObject(ctx context.Context, file string, planned *fingerprint) (*openedFile, fingerprint, error) {
	key, err := s.objectKey(file)
	if err != nil {
		return nil, fingerprint{}, err
	}
	var known *objstore.Attrs
	if planned != nil {
		known = &objstore.Attrs{Size: planned.Size, ModTime: time.Unix(0, planned.MTimeNS), ETag: planned.ETag}
	}
	rr, attrs, err := s.bucket.OpenRange(ctx, key, known)
	if err != nil {
		return nil, fingerprint{}, err
	}
	fp := fingerprint{Size: attrs.Size, MTimeNS: attrs.ModTime.UnixNano(), ETag: attrs.ETag}
	of, err := parseFile(file, rr, attrs.Size)
	if err != nil {
		rr.Close()
		return nil, fingerprint{}, err
	}
	of.ranged = rr
	return of, fp, nil
}

// chunkRange is the byte range of a column chunk: from its dictionary
// page when that precedes the first data page.
func chunkRange(cc *metadata.ColumnChunkMetaData) (start, n int64) {
	start, n = cc.DataPageOffset(), cc.TotalCompressedSize()
	if cc.HasDictionaryPage() && cc.DictionaryPageOffset() > 0 && cc.DictionaryPageOffset() < start {
		start = cc.DictionaryPageOffset()
	}
	return start, n
}

// ShardRanges are the byte ranges a shard reads: the chunks of the given
// leaf columns in the given row groups.
func shardRanges(md *metadata.FileMetaData, rowGroups, leaves []int) ([]objstore.Range, error) {
	var out []objstore.Range
	for _, rg := range rowGroups {
		g := md.RowGroup(rg)
		for _, c := range leaves {
			cc, err := g.ColumnChunk(c)
			if err != nil {
				return nil, fmt.Errorf("row group %d, column %d: %w", rg, c, err)
			}
			start, n := chunkRange(cc)
			out = append(out, objstore.Range{Off: start, Len: n})
		}
	}
	return out, nil
}

// ProjectedBytes is the compressed size of the named columns (all when
// nil) over every row group of the source's files: what a read of them
// needs at least. The bench compares bytes fetched against it.
func (s *Source) ProjectedBytes(ctx context.Context, columns []string) (int64, error) {
	var total int64
	for _, f := range s.files {
		of, _, err := s.openAny(ctx, f, nil)
		if err != nil {
			return 0, fmt.Errorf("parquet file %s: %w", f, err)
		}
		md := of.rdr.MetaData()
		var leaves []int
		for i := range md.Schema.NumColumns() {
			top := md.Schema.Column(i).ColumnPath()[0]
			if columns == nil || containsString(columns, top) {
				leaves = append(leaves, i)
			}
		}
		rgs := make([]int, md.NumRowGroups())
		for i := range rgs {
			rgs[i] = i
		}
		ranges, err := shardRanges(md, rgs, leaves)
		of.Close()
		if err != nil {
			return 0, err
		}
		for _, r := range ranges {
			total += r.Len
		}
	}
	return total, nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
