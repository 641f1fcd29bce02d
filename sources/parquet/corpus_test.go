package parquet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/precog-ml/precog/sources"
)

// corpusDir holds a subset of the apache/parquet-testing corpus
// (Apache-2.0, see its LICENSE.txt and README.md): every data and bad_data
// file under 20 KB, and hadoop_lz4_compressed_larger.parquet.
const corpusDir = "testdata/parquet-testing"

// corpusOutcome is what reading one corpus file must give: rows read, or
// exactly the error err, where {file} stands for the file's path.
type corpusOutcome struct {
	rows int64
	err  string
}

// corpusPins pins every corpus file's outcome. Row counts are those DuckDB
// reads (and the corpus README documents); a refusal must be the pinned
// error, naming the file and the column. A reader change that turns a
// clear error into a panic, a different error or a wrong row count fails
// here; a file added to the corpus without a pin fails too.
var corpusPins = map[string]corpusOutcome{
	// The files of issue 25: legacy LZ4 (Hadoop-framed and bare), a
	// repeated group without LIST in a file whose footer says 0 rows, and a
	// logical type newer than the reader.
	"data/hadoop_lz4_compressed.parquet":        {rows: 4},
	"data/hadoop_lz4_compressed_larger.parquet": {rows: 10000},
	"data/non_hadoop_lz4_compressed.parquet":    {rows: 4},
	"data/repeated_no_annotation.parquet":       {rows: 6},
	"data/repeated_primitive_no_list.parquet":   {rows: 4},
	"data/unknown-logical-type.parquet":         {rows: 3},
	// A data page v2 whose compressed values section is empty.
	"data/datapage_v2_empty_datapage.snappy.parquet": {rows: 1},

	"data/alltypes_dictionary.parquet":                    {rows: 2},
	"data/alltypes_plain.parquet":                         {rows: 8},
	"data/alltypes_plain.snappy.parquet":                  {rows: 2},
	"data/binary.parquet":                                 {rows: 12},
	"data/binary_truncated_min_max.parquet":               {rows: 12},
	"data/byte_array_decimal.parquet":                     {rows: 24},
	"data/byte_stream_split.zstd.parquet":                 {rows: 300},
	"data/byte_stream_split_extended.gzip.parquet":        {rows: 200},
	"data/column_chunk_key_value_metadata.parquet":        {rows: 0},
	"data/concatenated_gzip_members.parquet":              {rows: 513},
	"data/data_index_bloom_encoding_stats.parquet":        {rows: 14},
	"data/data_index_bloom_encoding_with_length.parquet":  {rows: 14},
	"data/datapage_v1-snappy-compressed-checksum.parquet": {rows: 5120},
	"data/datapage_v2.snappy.parquet":                     {rows: 5},
	"data/delta_encoding_optional_column.parquet":         {rows: 100},
	"data/delta_encoding_required_column.parquet":         {rows: 100},
	"data/delta_length_byte_array.parquet":                {rows: 1000},
	"data/dict-page-offset-zero.parquet":                  {rows: 39},
	"data/fixed_length_byte_array.parquet":                {rows: 1000},
	"data/fixed_length_decimal.parquet":                   {rows: 24},
	"data/fixed_length_decimal_legacy.parquet":            {rows: 24},
	"data/float16_nonzeros_and_nans.parquet":              {rows: 8},
	"data/float16_zeros_and_nans.parquet":                 {rows: 3},
	"data/floating_orders_nan_count.parquet":              {rows: 50},
	"data/geospatial/crs-arbitrary-value.parquet":         {rows: 1},
	"data/geospatial/crs-default.parquet":                 {rows: 1},
	"data/geospatial/crs-geography.parquet":               {rows: 1},
	"data/geospatial/crs-projjson.parquet":                {rows: 1},
	"data/geospatial/crs-srid.parquet":                    {rows: 1},
	"data/geospatial/geospatial-with-nan.parquet":         {rows: 3},
	"data/int32_decimal.parquet":                          {rows: 24},
	"data/int32_with_null_pages.parquet":                  {rows: 1000},
	"data/int64_decimal.parquet":                          {rows: 24},
	"data/list_columns.parquet":                           {rows: 3},
	"data/lz4_raw_compressed.parquet":                     {rows: 4},
	"data/map_no_value.parquet":                           {rows: 3},
	"data/nan_in_stats.parquet":                           {rows: 2},
	"data/nation.dict-malformed.parquet":                  {rows: 25},
	"data/nested_lists.snappy.parquet":                    {rows: 3},
	"data/nested_maps.snappy.parquet":                     {rows: 6},
	"data/nonnullable.impala.parquet":                     {rows: 1},
	"data/null_list.parquet":                              {rows: 1},
	"data/nullable.impala.parquet":                        {rows: 7},
	"data/nulls.snappy.parquet":                           {rows: 8},
	"data/old_list_structure.parquet":                     {rows: 1},
	"data/page_v2_empty_compressed.parquet":               {rows: 10},
	"data/plain-dict-uncompressed-checksum.parquet":       {rows: 1000},
	"data/rle-dict-snappy-checksum.parquet":               {rows: 1000},
	"data/rle-dict-uncompressed-corrupt-checksum.parquet": {rows: 1000},
	"data/rle_boolean_encoding.parquet":                   {rows: 68},
	"data/single_nan.parquet":                             {rows: 1},
	"data/sort_columns.parquet":                           {rows: 6},
	"bad_data/ARROW-GH-43605.parquet":                     {rows: 21186},

	// Refused, each naming its file and column.
	"data/incorrect_map_schema.parquet":            {err: `parquet file {file}: schema: column "my_map": MAP keys must be required`},
	"data/int96_from_spark.parquet":                {err: `parquet file {file}: row group 0 (file row 0): column "a": parquet INT96 timestamp at index 2: invalid: INT96 timestamp is outside the Arrow nanosecond range`},
	"data/large_string_map.brotli.parquet":         {err: `parquet file {file}: row group 0 (file row 0): column "arr": parquet: uncompressed page size 1073741828 exceeds configured limit 268435456`},
	"bad_data/ARROW-GH-45185.parquet":              {err: `parquet file {file}: row group 0 (file row 0): column "x": parquet: record starts with a nonzero repetition level`},
	"bad_data/ARROW-GH-47662.parquet":              {err: `parquet file {file}: row group 0 (file row 0): column "flba_field": parquet: eof exception`},
	"bad_data/ARROW-RS-GH-6229-DICTHEADER.parquet": {err: `parquet file {file}: row group 0, column "region_key": corrupt footer: column chunk at offset 466, 125 bytes, outside the file (533 bytes)`},
	"bad_data/ARROW-RS-GH-6229-LEVELS.parquet":     {err: `parquet file {file}: row group 0 (file row 0): column "outer": unexpected EOF`},
	"bad_data/PARQUET-1481.parquet":                {err: `parquet file {file}: schema: column "Handle": invalid physical column type`},
}

var quotedColumn = regexp.MustCompile(`column "[^"]+"`)

// TestParquetTestingCorpus reads every vendored parquet-testing file end to
// end (schema, plan, every shard, every column) and compares the outcome
// with its pin.
func TestParquetTestingCorpus(t *testing.T) {
	var files []string
	err := filepath.WalkDir(corpusDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".parquet") {
			rel, err := filepath.Rel(corpusDir, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(corpusPins) {
		t.Errorf("%d corpus files but %d pins", len(files), len(corpusPins))
	}
	for _, rel := range files {
		t.Run(rel, func(t *testing.T) {
			want, ok := corpusPins[rel]
			if !ok {
				t.Fatalf("no pin for %s: add its outcome to corpusPins", rel)
			}
			path := filepath.Join(corpusDir, filepath.FromSlash(rel))
			// Whole files, then shards of about a fifth of the file (at
			// least 3 rows), which start inside row groups and so
			// exercise seeking; each also with ReadOptions.Reuse (numeric
			// columns decoded into pooled memory other files left).
			var whole []string
			for _, read := range []struct {
				rowsPerShard int64
				reuse        bool
			}{{1 << 40, false}, {1 << 40, true}, {max(3, want.rows/5), false}, {max(3, want.rows/5), true}} {
				rowsPerShard := read.rowsPerShard
				values, err := readCorpusFile(path, rowsPerShard, read.reuse)
				rows := int64(len(values))
				if want.err != "" {
					if err == nil {
						t.Fatalf("rows per shard %d: read %d rows, want error %q", rowsPerShard, rows, want.err)
					}
					if !strings.Contains(err.Error(), path) || !quotedColumn.MatchString(err.Error()) || strings.Contains(err.Error(), "PANIC") {
						t.Fatalf("rows per shard %d: error %q does not name the file and a column", rowsPerShard, err)
					}
					// The exact error is pinned for whole files; a split
					// read may fail at a later row of the same column.
					if wantErr := strings.ReplaceAll(want.err, "{file}", path); rowsPerShard == 1<<40 && err.Error() != wantErr {
						t.Fatalf("error\n  %s\nwant\n  %s", err, wantErr)
					}
					continue
				}
				if err != nil {
					t.Fatalf("rows per shard %d: %v", rowsPerShard, err)
				}
				if rows != want.rows {
					t.Fatalf("rows per shard %d: read %d rows, want %d", rowsPerShard, rows, want.rows)
				}
				// Shards that start inside a row group read the same
				// values as whole files.
				if whole == nil {
					whole = values
					continue
				}
				for i := range values {
					if values[i] != whole[i] {
						t.Fatalf("rows per shard %d (reuse %v): row %d is %s, whole-file read gave %s", rowsPerShard, read.reuse, i, values[i], whole[i])
					}
				}
			}
		})
	}
	for rel := range corpusPins {
		if !fileListed(files, rel) {
			t.Errorf("pin for %s but no such corpus file", rel)
		}
	}
}

func fileListed(files []string, rel string) bool {
	for _, f := range files {
		if f == rel {
			return true
		}
	}
	return false
}

// readCorpusFile reads every row of every column of path through Schema,
// Plan and Open, and returns each row's values as text. A panic is an error
// (and fails the pin, which never expects one).
func readCorpusFile(path string, rowsPerShard int64, reuse bool) (rows []string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("PANIC: %v", r)
		}
	}()
	ctx := context.Background()
	s, err := New(path)
	if err != nil {
		return nil, err
	}
	sc, err := s.Schema(ctx)
	if err != nil {
		return nil, err
	}
	plans, err := s.Plan(ctx, rowsPerShard)
	if err != nil {
		return nil, err
	}
	var planned int64
	for _, p := range plans {
		planned += p.Rows
		r, err := s.Open(ctx, p.Plan, sources.ReadOptions{BatchSize: 2, Reuse: reuse})
		if err != nil {
			return rows, err
		}
		for {
			rec, err := r.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				r.Close()
				return rows, err
			}
			if int(rec.NumCols()) != sc.NumFields() {
				rec.Release()
				r.Close()
				return rows, fmt.Errorf("batch has %d columns, schema %d", rec.NumCols(), sc.NumFields())
			}
			for i := range int(rec.NumRows()) {
				var b strings.Builder
				for _, col := range rec.Columns() {
					b.WriteString(col.ValueStr(i))
					b.WriteByte('|')
				}
				rows = append(rows, b.String())
			}
			rec.Release()
		}
		if err := r.Close(); err != nil {
			return rows, err
		}
	}
	if int64(len(rows)) != planned {
		return rows, fmt.Errorf("read %d rows, plan says %d", len(rows), planned)
	}
	return rows, nil
}

// TestIssue25FileValues pins the values of the files issue 25 names (as
// DuckDB reads them and the corpus README describes them), and the types a
// model input sees: repeated fields without a LIST annotation are lists,
// so a repeated number column feeds a `column:` list input.
func TestIssue25FileValues(t *testing.T) {
	lz4Rows := []string{"1593604800|abc|42|", "1593604800|def|7.7|", "1593604801|abc|42.125|", "1593604801|def|7.7|"}
	cases := []struct {
		file  string
		rows  []string
		types map[string]string
	}{
		{file: "data/hadoop_lz4_compressed.parquet", rows: lz4Rows},
		{file: "data/non_hadoop_lz4_compressed.parquet", rows: lz4Rows},
		{file: "data/unknown-logical-type.parquet", rows: []string{
			"known string 1|unknown string 1|", "known string 2|unknown string 2|", "known string 3|unknown string 3|"}},
		{file: "data/repeated_no_annotation.parquet", rows: []string{
			"1|(null)|", "2|(null)|", `3|{"phone":[]}|`,
			`4|{"phone":[{"kind":null,"number":5555555555}]}|`,
			`5|{"phone":[{"kind":"home","number":1111111111}]}|`,
			`6|{"phone":[{"kind":"home","number":1111111111},{"kind":null,"number":2222222222},{"kind":"mobile","number":3333333333}]}|`},
			types: map[string]string{"id": "int32", "phoneNumbers": "struct<phone: list<item: struct<number: int64, kind: utf8 nullable>, nullable>>"}},
		{file: "data/repeated_primitive_no_list.parquet", rows: []string{
			`[0,1,2,3]|["foo","zero","one","two"]|{"Int32_list_in_group":[0,1,2,3],"String_list_in_group":["foo","zero","one","two"]}|`,
			`[]|["three"]|{"Int32_list_in_group":[],"String_list_in_group":["three"]}|`,
			`[4]|["four"]|{"Int32_list_in_group":[4],"String_list_in_group":["four"]}|`,
			`[5,6,7,8]|["five","six","seven","eight"]|{"Int32_list_in_group":[5,6,7,8],"String_list_in_group":["five","six","seven","eight"]}|`},
			types: map[string]string{"Int32_list": "list<item: int32, nullable>", "String_list": "list<item: utf8, nullable>"}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join(corpusDir, filepath.FromSlash(c.file))
			rows, err := readCorpusFile(path, 1<<40, true)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(rows, "\n") != strings.Join(c.rows, "\n") {
				t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(c.rows, "\n"))
			}
			sc, err := mustNew(t, path).Schema(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range c.types {
				f, ok := sc.FieldsByName(name)
				if !ok || f[0].Type.String() != want {
					t.Errorf("column %s: %v, want %s", name, f, want)
				}
			}
		})
	}
}
