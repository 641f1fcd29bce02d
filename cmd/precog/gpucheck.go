//go:build gpucheck

package main

import (
	"fmt"
	"os"

	"github.com/precog-ml/precog/cmd/precog-bench/bench"
)

// The GPU check build (`go build -tags gpucheck`, scripts/gpu-bundle.sh)
// carries the bench harness and the GPU checks in the precog binary itself,
// so that the bundle shipped to a GPU machine holds one Go binary:
// `precog gpu-check ARGS` is `precog-bench ARGS` with -precog defaulting to
// this binary (-check models|worker|testdata, -compare, -sections gpu).
// It answers before the CLI parses anything; an ordinary build has no such
// command.
func init() {
	if len(os.Args) < 2 || os.Args[1] != "gpu-check" {
		return
	}
	if len(os.Args) == 2 {
		// Without arguments the bench would run every section.
		fmt.Fprintln(os.Stderr, "usage: precog gpu-check -check models|worker|testdata [-check-device cuda:0] [-work DIR]\n       precog gpu-check -compare CPU_DIR,GPU_DIR [-compare-tolerance X]\n       precog gpu-check -sections gpu [bench flags]   (-h lists them)")
		os.Exit(2)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpu-check:", err)
		os.Exit(1)
	}
	os.Exit(bench.Main(os.Args[2:], self))
}
