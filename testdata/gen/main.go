// Command gen writes precog's test models, datasets and example job specs:
//
//	go run ./testdata/gen -out DIR [-rows N] [-files F] [-dates 2026-11-01,2026-11-02] [-seed S]
//
// Everything is deterministic from the seed; the logic lives in internal/testgen.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/precog-ml/precog/internal/testgen"
)

func main() {
	out := flag.String("out", "testdata/generated", "output directory")
	rows := flag.Int64("rows", 10000, "rows per date partition")
	files := flag.Int("files", 2, "files per date partition")
	dates := flag.String("dates", "2026-11-01,2026-11-02", "comma-separated dt= partitions")
	seed := flag.Uint64("seed", testgen.DefaultSeed, "feature seed")
	writer := flag.String("writer", string(testgen.WriterParquetGo), "parquet writer: parquet-go or arrow")
	codec := flag.String("codec", string(testgen.CodecSnappy), "compression: none, snappy, zstd, gzip")
	flag.Parse()

	g, err := testgen.Generate(*out, testgen.GenerateOptions{
		RowsPerDate: *rows, FilesPerDate: *files, Dates: strings.Split(*dates, ","), Seed: *seed,
		Writer: testgen.Writer(*writer), Codec: testgen.Codec(*codec),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	for _, m := range g.Models {
		fmt.Println("model", m)
	}
	for _, f := range g.Data.Files {
		fmt.Println("data ", f)
	}
	for _, j := range g.Jobs {
		fmt.Println("job  ", j)
	}
	fmt.Printf("%d rows, %.1f MB of parquet, in %s\n", g.Data.Rows, float64(g.Data.Bytes)/1e6, g.Elapsed.Round(1e6))
}
