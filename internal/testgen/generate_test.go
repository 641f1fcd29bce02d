package testgen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGenerate(t *testing.T) {
	out := t.TempDir()
	g, err := Generate(out, GenerateOptions{RowsPerDate: 301, FilesPerDate: 2, Dates: []string{"2026-11-05"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Models) != len(All()) || len(g.Data.Files) != 2 || g.Data.Rows != 302 || len(g.Jobs) != 3 {
		t.Fatalf("generated %+v", g)
	}
	spec, err := os.ReadFile(filepath.Join(out, "jobs", "user-recs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(spec), filepath.Join(out, "models", "recs.onnx")) {
		t.Errorf("user-recs.yaml does not point at the generated model:\n%s", spec)
	}
	readBack(t, g.Data.Files[1], Dataset{Seed: DefaultSeed, Dim: 32, RowsPerFile: 151, RowsPerGroup: 151}, 151, 151)
	if _, err := Generate(out, GenerateOptions{Dates: []string{"11/05/2026"}}); err == nil {
		t.Error("bad date: want error")
	}
}
