package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/precog-ml/precog/jobs"
)

// miniLMResult is one line of minilm.py run.
type miniLMResult struct {
	Rows      int64   `json:"rows"`
	RowsPerS  float64 `json:"rows_per_s"`
	Precision string  `json:"precision"`
	Compared  int64   `json:"compared"`
	MinCosine float64 `json:"min_cosine"`
}

// minilm measures issue 33's text model: a BERT of MiniLM's shape (6
// layers, 384 wide) that PyTorch builds and exports on this machine
// (torchloop.py minilm-export), run as precog's text job in fp32 (ONNX Runtime's TF32
// matmuls) and precision: fp16, against the same weights in a PyTorch loop
// in TF32, fp32 and fp16, end to end with tokenization, each with its GPU
// busy %, and the least cosine between precog's vectors and PyTorch's.
// Without python3 with torch (CUDA), transformers, tokenizers and pyarrow
// it says so. A failed step is a note, not the section's error: the rest
// of the section stands.
func (g *gpuBench) minilm(ctx context.Context, tokPath, data string) {
	check := exec.CommandContext(ctx, "python3", "-c", "import torch, transformers, tokenizers, pyarrow, onnx; assert torch.cuda.is_available()")
	if out, err := check.CombinedOutput(); err != nil {
		g.s.note("MiniLM-shaped model skipped: no python3 with torch (CUDA), transformers, tokenizers, onnx and pyarrow here (%v: %s)", err, tail(strings.TrimSpace(string(out)), 200))
		return
	}
	if err := g.minilmRows(ctx, tokPath, data); err != nil {
		g.s.note("MiniLM-shaped model: FAILED: %v", err)
	}
}

func (g *gpuBench) minilmRows(ctx context.Context, tokPath, data string) error {
	h := g.h
	dir := filepath.Join(h.cfg.work, "gpu-minilm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	script := filepath.Join(dir, "torchloop.py")
	if err := os.WriteFile(script, torchLoop, 0o644); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "python3", script, "minilm-export", tokPath, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("export: %w: %s", err, tail(string(out), 1500))
	}
	precog := map[jobs.Precision]runStats{}
	busy := map[jobs.Precision]float64{}
	for _, p := range []jobs.Precision{jobs.PrecisionFP32, jobs.PrecisionFP16} {
		spec, err := g.minilmSpec(dir, tokPath, data, p)
		if err != nil {
			return err
		}
		var st runStats
		b, err := g.busy(func() error {
			var err error
			st, err = h.runPrecog(ctx, spec, filepath.Join(h.cfg.work, "state-gpu-minilm-"+string(p)), nil)
			return err
		})
		if err != nil {
			return fmt.Errorf("precog %s: %w", p, err)
		}
		precog[p], busy[p] = st, b
		g.s.note("MiniLM-shaped text job on %s, precision %s: %d titles, %.0f rows/s after start-up (%s); stage busy time %s.",
			g.dev, p, st.RowsIn, st.WorkRPS, busyText(b), st.Stages)
	}
	torch := map[string]miniLMResult{}
	torchBusy := map[string]float64{}
	for _, prec := range []string{"tf32", "fp32", "fp16"} {
		// Compared with precog's vectors of the same width: fp16 with fp16.
		vs := jobs.PrecisionFP32
		if prec == "fp16" {
			vs = jobs.PrecisionFP16
		}
		against := g.minilmOut(vs)
		var res miniLMResult
		b, err := g.busy(func() error {
			cmd := exec.CommandContext(ctx, "python3", script, "minilm", dir, tokPath, data, fmt.Sprint(textMaxLen), fmt.Sprint(batchSize), prec, against)
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("python3 torchloop.py minilm %s: %w", prec, err)
			}
			return json.Unmarshal(lastLine(out), &res)
		})
		if err != nil {
			return err
		}
		torch[prec], torchBusy[prec] = res, b
		g.s.note("PyTorch loop, MiniLM-shaped, %s: %.0f rows/s (%s); least cosine against precog's %s vectors over %d titles: %.6f.",
			prec, res.RowsPerS, busyText(b), vs, res.Compared, res.MinCosine)
	}
	best := max(torch["tf32"].RowsPerS, torch["fp32"].RowsPerS)
	fp32, fp16 := precog[jobs.PrecisionFP32], precog[jobs.PrecisionFP16]
	g.s.add(atLeast(fmt.Sprintf("MiniLM-shaped text job on %s (%d titles, max_length %d, fp32 with ONNX Runtime's TF32 matmuls, %s) vs PyTorch's best of TF32 and fp32 (batches of %d, tokenization included)",
		g.dev, fp32.RowsIn, textMaxLen, busyText(busy[jobs.PrecisionFP32]), batchSize), fp32.WorkRPS, best, "rows/s", 1.0))
	g.s.add(atLeast(fmt.Sprintf("MiniLM-shaped text job on %s, precision: fp16 (%s) vs PyTorch's best of TF32 and fp32 (issue 33: ≥ 2x)",
		g.dev, busyText(busy[jobs.PrecisionFP16])), fp16.WorkRPS, best, "rows/s", 2.0))
	r := atLeast(fmt.Sprintf("MiniLM-shaped text job on %s, precision: fp16 vs the PyTorch loop in fp16 (%s)", g.dev, busyText(torchBusy["fp16"])),
		fp16.WorkRPS, torch["fp16"].RowsPerS, "rows/s", 1.0)
	r.Target, r.Verdict = "report", "—"
	g.s.add(r)
	// issue 33: fp16 within cosine 0.999 of fp32; the same bound here for
	// every pair (TF32 matmuls on either side).
	for prec, res := range torch {
		if res.Compared != fp32.RowsIn || res.MinCosine < 0.999 {
			return fmt.Errorf("PyTorch %s vs precog: %d of %d titles compared, least cosine %.6f (want ≥ 0.999)", prec, res.Compared, fp32.RowsIn, res.MinCosine)
		}
	}
	return nil
}

// minilmSpec writes the MiniLM-shaped text job in precision p, with the
// device's defaults (batch size, shards in flight, sessions).
func (g *gpuBench) minilmSpec(dir, tokPath, data string, p jobs.Precision) (string, error) {
	return g.h.writeTextJob(textJob{Name: "bench-gpu-minilm-" + string(p), Data: data, Model: filepath.Join(dir, "minilm.onnx"),
		Tokenizer: tokPath, Device: g.dev, Precision: p, TokenTypes: true, Out: g.minilmOut(p)})
}

// minilmOut is where the MiniLM-shaped job in precision p publishes.
func (g *gpuBench) minilmOut(p jobs.Precision) string {
	return filepath.Join(g.h.cfg.work, "out", "gpu-minilm-"+string(p))
}
