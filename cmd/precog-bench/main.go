// Command precog-bench is precog's end-to-end benchmark harness (`make
// bench`); the harness itself is package bench, which the GPU check build
// of precog (`-tags gpucheck`) also carries as `precog gpu-check`.
//
//	go run ./cmd/precog-bench -out .cache/bench-results.md -readme docs/benchmarks.md
package main

import (
	"os"

	"github.com/precog-ml/precog/cmd/precog-bench/bench"
)

func main() { os.Exit(bench.Main(os.Args[1:], "")) }
