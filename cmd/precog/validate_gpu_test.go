package main

import (
	"strings"
	"testing"
)

// TestValidateWarnsSmallModelOnGPU: a spec that runs the ranker (about 2
// kFLOP per row) on cuda:0 gets validate's warning that the CPU is likely as
// fast, even on this machine where cuda:0 then fails; heavy (4 MFLOP per
// row) on cuda:0 and the ranker on the CPU get none.
func TestValidateWarnsSmallModelOnGPU(t *testing.T) {
	dir := workdir(t)
	onGPU := strings.Replace(rankerSpec, "  batch_size: 256\n", "  batch_size: 256\n  device: cuda:0\n", 1)
	r := precog(t, dir, "validate", writeSpec(t, dir, "small.yaml", onGPU), "--param", "date=2026-11-01")
	for _, want := range []string{"warning: model", "ranker.onnx is small for a GPU", "2.3 kFLOP per row", "cuda:0"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}

	heavy := strings.NewReplacer("models/ranker.onnx", "models/heavy.onnx").Replace(onGPU)
	r = precog(t, dir, "validate", writeSpec(t, dir, "heavy.yaml", heavy), "--param", "date=2026-11-01")
	if strings.Contains(r.stderr, "small for a GPU") {
		t.Errorf("heavy on cuda:0 warned:\n%s", r.stderr)
	}
	r = precog(t, dir, "validate", writeSpec(t, dir, "cpu.yaml", rankerSpec), "--param", "date=2026-11-01")
	if r.code != 0 || strings.Contains(r.stderr, "warning") {
		t.Errorf("ranker on the CPU: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}
