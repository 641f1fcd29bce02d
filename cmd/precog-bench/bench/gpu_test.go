package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/precog-ml/precog/runner/model"
)

// TestGPUSectionSkipsWithoutDevice: where cuda:0 is unusable (this
// machine) the gpu section measures nothing and says why in one line.
func TestGPUSectionSkipsWithoutDevice(t *testing.T) {
	if model.CheckDevice("cuda:0") == nil {
		t.Skip("cuda:0 works here")
	}
	h := &harness{cfg: config{work: t.TempDir(), gpuDevice: "cuda:0"}}
	s, err := h.gpu(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rows) != 0 || len(s.Notes) != 1 || !strings.HasPrefix(s.Notes[0], "skipped: no usable GPU here (cuda:0: ") {
		t.Fatalf("section %+v", s)
	}
}

// TestOnDevice: the GPU copy of a bench spec runs on the device with the
// batch size the device chooses (no batch_size line), the rest unchanged.
func TestOnDevice(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bench-x.yaml")
	y := "name: x\nmodel:\n  path: m.onnx\n  batch_size: 1024\nsinks:\n  parquet: { path: out }\n"
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := onDevice(p, "cuda:0")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	if want := "name: x\nmodel:\n  path: m.onnx\n  device: cuda:0\nsinks:\n  parquet: { path: out }\n"; string(b) != want || out == p {
		t.Fatalf("%s:\n%s", out, b)
	}
	if _, err := onDevice(out, "cuda:0"); err == nil {
		t.Fatal("a spec without the CPU batch was rewritten")
	}
}
