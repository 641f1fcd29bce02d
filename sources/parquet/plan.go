package parquet

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/precog-ml/precog/sources"
)

// maxShards bounds one plan. A corrupt footer can claim absurd row counts;
// this turns that into an error instead of an out-of-memory plan. At the
// default 250k rows per shard it allows 250 billion rows.
const maxShards = 1_000_000

// shardPlan is the JSON plan of one shard: Rows rows of File starting at row
// Offset of row group FirstRowGroup and spanning NumRowGroups row groups.
type shardPlan struct {
	File          string `json:"file"`
	Size          int64  `json:"size"`
	MTimeNS       int64  `json:"mtime_ns"`
	ETag          string `json:"etag,omitempty"`
	FirstRowGroup int    `json:"first_row_group"`
	NumRowGroups  int    `json:"num_row_groups"`
	Offset        int64  `json:"offset"`
	Rows          int64  `json:"rows"`
}

// Plan splits the dataset into shards of at most rowsPerShard rows from the
// file footers alone. Whole row groups of one file are packed together; a row
// group larger than rowsPerShard is split into near-equal row ranges. A
// dataset of zero-row files plans zero shards.
func (s *Source) Plan(ctx context.Context, rowsPerShard int64) ([]sources.ShardPlan, error) {
	if rowsPerShard <= 0 {
		return nil, fmt.Errorf("parquet source %q: rows per shard must be positive, got %d", s.path, rowsPerShard)
	}
	fts, err := s.readFooters(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkCompatible(s.files, fts); err != nil {
		return nil, err
	}
	var out []sources.ShardPlan
	var count int64
	for i, ft := range fts {
		for _, n := range ft.rowGroups {
			count += (n + rowsPerShard - 1) / rowsPerShard
		}
		if count > maxShards {
			return nil, fmt.Errorf("parquet source %q: more than %d shards of %d rows (at %s); raise rows_per_shard", s.path, maxShards, rowsPerShard, s.files[i])
		}
	}
	for i, ft := range fts {
		for _, sp := range planFile(s.files[i], ft, rowsPerShard) {
			raw, err := json.Marshal(sp)
			if err != nil {
				return nil, fmt.Errorf("parquet source: encoding plan for %s: %w", sp.File, err)
			}
			out = append(out, sources.ShardPlan{Plan: raw, Rows: sp.Rows, Desc: sp.desc(ft.rowGroups)})
		}
	}
	return out, nil
}

func planFile(path string, ft footer, rowsPerShard int64) []shardPlan {
	var out []shardPlan
	base := shardPlan{File: path, Size: ft.fp.Size, MTimeNS: ft.fp.MTimeNS, ETag: ft.fp.ETag}
	cur := base
	cur.FirstRowGroup = -1
	flush := func() {
		if cur.FirstRowGroup >= 0 && cur.Rows > 0 {
			out = append(out, cur)
		}
		cur = base
		cur.FirstRowGroup = -1
	}
	for rg, n := range ft.rowGroups {
		switch {
		case n == 0:
			// Nothing to read; an open run of groups may continue past it.
			if cur.FirstRowGroup >= 0 {
				cur.NumRowGroups++
			}
		case n > rowsPerShard:
			flush()
			pieces := (n + rowsPerShard - 1) / rowsPerShard
			var off int64
			for p := int64(0); p < pieces; p++ {
				size := n / pieces
				if p < n%pieces {
					size++
				}
				sp := base
				sp.FirstRowGroup, sp.NumRowGroups, sp.Offset, sp.Rows = rg, 1, off, size
				out = append(out, sp)
				off += size
			}
		default:
			if cur.FirstRowGroup >= 0 && cur.Rows+n > rowsPerShard {
				flush()
			}
			if cur.FirstRowGroup < 0 {
				cur.FirstRowGroup = rg
			}
			cur.NumRowGroups++
			cur.Rows += n
		}
	}
	flush()
	return out
}

// desc is the human description: "path rows a..b (row groups i..j)".
func (sp shardPlan) desc(rowGroups []int64) string {
	var start int64
	for i := 0; i < sp.FirstRowGroup && i < len(rowGroups); i++ {
		start += rowGroups[i]
	}
	start += sp.Offset
	last := sp.FirstRowGroup + sp.NumRowGroups - 1
	if last == sp.FirstRowGroup {
		return fmt.Sprintf("%s rows %d..%d (row group %d)", sp.File, start, start+sp.Rows, sp.FirstRowGroup)
	}
	return fmt.Sprintf("%s rows %d..%d (row groups %d..%d)", sp.File, start, start+sp.Rows, sp.FirstRowGroup, last)
}
