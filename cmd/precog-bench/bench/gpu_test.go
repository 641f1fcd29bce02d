package bench

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/precog-ml/precog/jobs"
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

// TestWriteTextJob: the bench's text jobs (the text section's, the gpu
// section's and its MiniLM-shaped one) come from one writer; each option
// reaches the spec, and a left-out batch size is the device's choice.
func TestWriteTextJob(t *testing.T) {
	h := &harness{cfg: config{work: t.TempDir()}}
	for _, j := range []textJob{
		{Name: "plain", Batch: 1024},
		{Name: "gpu", Device: "cuda:0", Precision: jobs.PrecisionFP16, TokenTypes: true},
	} {
		j.Data, j.Model, j.Tokenizer, j.Out = "data", "m.onnx", "tok.json", "out"
		p, err := h.writeTextJob(j)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := jobs.Load(p, nil)
		if err != nil {
			t.Fatalf("%s: %v", j.Name, err)
		}
		m := spec.Model
		_, types := m.Inputs["token_type_ids"]
		device := cmp.Or(j.Device, jobs.DeviceCPU)
		if spec.Name != j.Name || m.Device != device || m.AutoBatch() != (j.Batch == 0) || types != j.TokenTypes ||
			m.Precision != cmp.Or(j.Precision, jobs.PrecisionFP32) || m.Pooling != jobs.PoolingMean || spec.Source.Key != "id" {
			t.Errorf("%s: spec %+v", j.Name, m)
		}
	}
}
