package bench

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/precog-ml/precog/internal/testgen"
)

// TestDuckJobSQL builds the feed row's COPY statement: identifiers and
// paths quoted (a quote inside survives), the features summed in order,
// snappy Parquet, and precog's two bookkeeping columns only when asked.
func TestDuckJobSQL(t *testing.T) {
	j := duckJob{Files: []string{"/d/a.parquet", "/d/it's.parquet"}, Out: "/o/out.parquet", Key: "user_id",
		Features: []string{"f0", "f1", `f"2`}, Threads: 2}
	got, err := j.sql()
	if err != nil {
		t.Fatal(err)
	}
	want := `COPY (SELECT "user_id", "f0" + "f1" + "f""2" AS score FROM read_parquet(['/d/a.parquet', '/d/it''s.parquet'])) ` +
		`TO '/o/out.parquet' (FORMAT parquet, COMPRESSION snappy)`
	if got != want {
		t.Fatalf("sql:\n got %s\nwant %s", got, want)
	}
	j.Tail, j.ModelVersion = true, "v'1"
	got, err = j.sql()
	if err != nil {
		t.Fatal(err)
	}
	if want := `AS score, 'v''1' AS "model_version", now() AS "computed_at" FROM`; !strings.Contains(got, want) {
		t.Fatalf("sql with the tail: %s lacks %s", got, want)
	}
	bad := map[string]func(*duckJob){
		"no input files":     func(j *duckJob) { j.Files = nil },
		"no output path":     func(j *duckJob) { j.Out = "" },
		"no key column":      func(j *duckJob) { j.Key = "" },
		"no feature columns": func(j *duckJob) { j.Features = nil },
		"threads 0":          func(j *duckJob) { j.Threads = 0 },
		"need a model version": func(j *duckJob) {
			j.Tail, j.ModelVersion = true, ""
		},
	}
	for msg, edit := range bad {
		j := duckJob{Files: []string{"a"}, Out: "o", Key: "k", Features: []string{"f"}, Threads: 1}
		edit(&j)
		if _, err := j.sql(); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: err %v", msg, err)
		}
	}
}

// TestFindDuckDBNamesMakeDuckdb: without `make duckdb`'s packages the feed
// section fails with an error that says how to get them.
func TestFindDuckDBNamesMakeDuckdb(t *testing.T) {
	_, err := findDuckDB(t.TempDir(), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "make duckdb") {
		t.Fatalf("err %v, want one naming `make duckdb`", err)
	}
	t.Setenv(envDuckDB, t.TempDir())
	_, err = findDuckDB("", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "make duckdb") || !strings.Contains(err.Error(), os.Getenv(envDuckDB)) {
		t.Fatalf("err %v, want one naming `make duckdb` and $%s", err, envDuckDB)
	}
}

// TestDuckDBVersionPinned: the version the bench looks for is the one
// scripts/duckdb.sh pins and the Makefile fetches.
func TestDuckDBVersionPinned(t *testing.T) {
	for path, re := range map[string]string{
		"../../../scripts/duckdb.sh": `DUCKDB_VERSION=\$\{DUCKDB_VERSION:-([^}]+)\}`,
		"../../../Makefile":          `(?m)^DUCKDB_VERSION \?= (\S+)$`,
	} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(re).FindSubmatch(b)
		if m == nil || string(m[1]) != duckdbVersion {
			t.Errorf("%s pins %q, the bench looks for %s", path, m, duckdbVersion)
		}
	}
}

// TestDuckDBRun runs duckfeed.js where `make duckdb` has been run (skipped
// elsewhere: the suite does not need DuckDB): on a small dataset it writes
// the asked columns and every row, and a row count other than the input's
// is an error.
func TestDuckDBRun(t *testing.T) {
	dir := os.Getenv(envDuckDB)
	if dir == "" {
		dir = filepath.Join("..", "..", "..", ".cache", "duckdb-"+duckdbVersion)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@duckdb", "node-api")); err != nil {
		t.Skipf("DuckDB's node bindings are not fetched (make duckdb): %v", err)
	}
	work := t.TempDir()
	d, err := findDuckDB(dir, work)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(work, "data")
	if _, err := testgen.WriteDataset(data, testgen.Dataset{Layout: testgen.LayoutColumns, FilesPerDate: 3, RowsPerFile: 1000}); err != nil {
		t.Fatal(err)
	}
	files, err := datasetFiles(data)
	if err != nil {
		t.Fatal(err)
	}
	j := duckJob{Files: files, Out: filepath.Join(work, "out.parquet"), Key: testgen.KeyColumn, Features: featureColumns(), Threads: 1}
	for _, tail := range []bool{false, true} {
		j.Tail, j.ModelVersion = tail, "0123456789ab"
		st, err := d.run(context.Background(), j, 3000)
		if err != nil {
			t.Fatal(err)
		}
		if st.Rows != 3000 || st.Wall <= 0 || st.CPU <= 0 {
			t.Fatalf("stats %+v", st)
		}
		pf, err := file.OpenParquetFile(j.Out, false)
		if err != nil {
			t.Fatal(err)
		}
		var cols []string
		for i := range pf.MetaData().Schema.NumColumns() {
			cols = append(cols, pf.MetaData().Schema.Column(i).Name())
		}
		pf.Close()
		want := "user_id,score"
		if tail {
			want += ",model_version,computed_at"
		}
		if strings.Join(cols, ",") != want {
			t.Fatalf("tail %v: columns %v, want %s", tail, cols, want)
		}
	}
	if _, err := d.run(context.Background(), j, 2999); err == nil || !strings.Contains(err.Error(), "the input has 2999") {
		t.Fatalf("a short count passed: %v", err)
	}
}
