package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/precog-ml/precog/internal/gpumon"
	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
	"github.com/precog-ml/precog/runner/model"
	"github.com/precog-ml/precog/runner/model/tokenizer"
)

//go:embed torchloop.py
var torchLoop []byte

// gpu is issue 33's section, every job with the defaults a user gets
// (batch size, shards in flight and sessions chosen by the device): on
// cuda:0, heavy against the pipeline's own ceiling on this machine (the
// null model's job on the same GPU) and against raw ONNX Runtime CUDA at
// the batch the device chose; heavy and the ranker against the same
// machine's CPU (no model may be slower on the GPU); the text job against
// raw ORT CUDA on the same buckets and against a PyTorch loop where
// python3 has torch; GPU busy % of each run (NVML). Without a usable GPU
// it says so in one line and measures nothing.
func (h *harness) gpu(ctx context.Context) (*section, error) {
	dev := h.cfg.gpuDevice
	s := &section{Title: fmt.Sprintf("GPU: %s against raw ONNX Runtime CUDA, the CPU and PyTorch", dev)}
	if err := model.CheckDevice(dev); err != nil {
		s.note("skipped: no usable GPU here (%s: %v)", dev, err)
		return s, nil
	}
	if !jobs.IsGPU(dev) {
		s.note("a dry run on %s: the section's code, not a measurement of a GPU", dev)
	}
	mon, err := gpumon.Default()
	if err != nil {
		s.note("GPU busy %% not measured: %v", err)
	}
	g := &gpuBench{h: h, s: s, mon: mon, dev: dev}
	if err := g.ceiling(ctx); err != nil {
		return s, fmt.Errorf("null model: %w", err)
	}
	if err := g.mlp(ctx, "heavy", 0.8); err != nil {
		return s, fmt.Errorf("heavy: %w", err)
	}
	if err := g.mlp(ctx, "ranker", 0); err != nil {
		return s, fmt.Errorf("ranker: %w", err)
	}
	if err := g.text(ctx); err != nil {
		return s, fmt.Errorf("text: %w", err)
	}
	s.note("precision: precog's CUDA sessions leave ONNX Runtime's use_tf32 at its default (on): MatMul and Gemm compute in TF32 on sm_80 and newer; the PyTorch rows say theirs.")
	return s, nil
}

// gpuBench carries the gpu section's harness, table and GPU monitor.
type gpuBench struct {
	h   *harness
	s   *section
	mon *gpumon.Monitor
	// dev is the device measured (cuda:0; cpu in a dry run).
	dev string
	// nullRPS is the null model's job on the GPU (ceiling): the most rows/s
	// the pipeline feeds a model that costs nothing, on this machine.
	nullRPS float64
}

// busy runs fn and returns the share of its time the GPU was busy
// (-1 without NVML).
func (g *gpuBench) busy(fn func() error) (float64, error) {
	if g.mon == nil {
		return -1, fn()
	}
	stop := g.mon.Watch(0)
	before := g.mon.Reading(0)
	err := fn()
	after := g.mon.Reading(0)
	stop()
	if d := after.Sampled - before.Sampled; d > 0 {
		return (after.Busy - before.Busy) / d, err
	}
	return -1, err
}

func busyText(b float64) string {
	if b < 0 {
		return "busy n/a"
	}
	return fmt.Sprintf("GPU busy %.0f%%", 100*b)
}

// onDevice rewrites the spec at path into a copy that runs on dev with the
// batch size the device chooses (the bench's CPU batch_size line goes).
func onDevice(path, dev string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	old := fmt.Sprintf("  batch_size: %d\n", batchSize)
	if !bytes.Contains(b, []byte(old)) {
		return "", fmt.Errorf("%s: no %q to replace", path, strings.TrimSpace(old))
	}
	y := strings.Replace(string(b), old, fmt.Sprintf("  device: %s\n", dev), 1)
	out := strings.TrimSuffix(path, ".yaml") + "-" + strings.ReplaceAll(dev, ":", "") + ".yaml"
	return out, os.WriteFile(out, []byte(y), 0o644)
}

// mlpSpec writes a feature model's job over rows rows, on the CPU at the
// bench's batch, or (onDev) on the device with the device's defaults.
func (g *gpuBench) mlpSpec(name string, rows int64, onDev bool) (string, error) {
	h := g.h
	data, err := h.dataset(rows)
	if err != nil {
		return "", err
	}
	where := "cpu"
	if onDev {
		where = "dev"
	}
	sink := fmt.Sprintf("  parquet: { path: %q }\n", filepath.Join(h.cfg.work, "out", "gpu-"+name+"-"+where))
	spec, err := h.writeSpec("bench-gpu-"+name+"-"+where, name, data, map[string]string{"score": "score"}, sink)
	if err != nil || !onDev {
		return spec, err
	}
	return onDevice(spec, g.dev)
}

// onGPU runs a job spec written by mlpSpec on the GPU, with its GPU busy share.
func (g *gpuBench) onGPU(ctx context.Context, name, spec string) (runStats, float64, error) {
	var st runStats
	busy, err := g.busy(func() error {
		var err error
		st, err = g.h.runPrecog(ctx, spec, filepath.Join(g.h.cfg.work, "state-gpu-"+name), nil)
		return err
	})
	return st, busy, err
}

// ceiling measures the pipeline's own ceiling on this machine: the null
// model (a ReduceSum of the features) run as a job on the GPU with the
// defaults, what heavy is held against.
func (g *gpuBench) ceiling(ctx context.Context) error {
	null := testgen.NewNull()
	if err := null.WriteONNX(filepath.Join(g.h.models, "null.onnx")); err != nil {
		return err
	}
	spec, err := g.mlpSpec("null", g.h.cfg.gpuRows, true)
	if err != nil {
		return err
	}
	st, busy, err := g.onGPU(ctx, "null", spec)
	if err != nil {
		return err
	}
	g.nullRPS = st.WorkRPS
	g.s.note("the pipeline's own ceiling on this machine: the null model's job on %s with the defaults, %d rows: %.0f rows/s (%s); stage busy time %s.",
		g.dev, st.RowsIn, st.WorkRPS, busyText(busy), st.Stages)
	return nil
}

// mlp measures a feature model's job on the GPU, with the defaults, over
// gpuRows rows, against the CPU (over heavyRow rows: the CPU's rows/s
// settle on fewer) and, when rawTarget > 0, against the pipeline's ceiling
// and raw ORT CUDA at the batch the device chose.
func (g *gpuBench) mlp(ctx context.Context, name string, rawTarget float64) error {
	h := g.h
	gpuSpec, err := g.mlpSpec(name, h.cfg.gpuRows, true)
	if err != nil {
		return err
	}
	cpuSpec, err := g.mlpSpec(name, h.cfg.heavyRow, false)
	if err != nil {
		return err
	}
	onGPU, busy, err := g.onGPU(ctx, name, gpuSpec)
	if err != nil {
		return err
	}
	if rawTarget > 0 && g.nullRPS > 0 {
		g.s.add(atLeast(fmt.Sprintf("%s on %s (%d rows, defaults, %s): run rows/s vs the pipeline's own ceiling (the null model's job on %s, defaults)",
			name, g.dev, onGPU.RowsIn, busyText(busy), g.dev), onGPU.WorkRPS, g.nullRPS, "rows/s", rawTarget))
	}
	if rawTarget > 0 {
		var raw float64
		rawBusy, err := g.busy(func() error {
			var err error
			raw, err = h.rawORT(gpuSpec)
			return err
		})
		if err != nil {
			return fmt.Errorf("raw ORT CUDA: %w", err)
		}
		g.s.add(atLeast(fmt.Sprintf("%s on %s (%d rows, defaults, %s): run rows/s after start-up vs raw ORT CUDA at the batch the device chose (%s)",
			name, g.dev, onGPU.RowsIn, busyText(busy), busyText(rawBusy)), onGPU.WorkRPS, raw, "rows/s", rawTarget))
	}
	onCPU, err := h.runPrecog(ctx, cpuSpec, filepath.Join(h.cfg.work, "state-gpucpu-"+name), nil)
	if err != nil {
		return err
	}
	g.s.add(atLeast(fmt.Sprintf("%s: %s (defaults) vs cpu (batch %d, %d cores), run rows/s: no model slower on the GPU",
		name, g.dev, batchSize, nprocs()), onGPU.WorkRPS, onCPU.WorkRPS, "rows/s", 1.0))
	g.s.note("%s on %s: stage busy time %s; on the CPU: %s.", name, g.dev, onGPU.Stages, onCPU.Stages)
	return nil
}

// text measures the text job on the GPU against raw ORT CUDA on the same
// buckets and a PyTorch loop.
func (g *gpuBench) text(ctx context.Context) error {
	h := g.h
	n := int(h.cfg.textRows)
	dir := filepath.Join(h.cfg.work, "gpu-text")
	modelPath, err := testgen.NewTextEmbedderSized(testgen.DefaultSeed, textWidth, textWidth).Write(filepath.Join(dir, "model"))
	if err != nil {
		return err
	}
	tokPath := filepath.Join(dir, "model", "tokenizer.json")
	tok, err := tokenizer.Load(tokPath)
	if err != nil {
		return err
	}
	data := filepath.Join(dir, "data")
	if err := writeTitles(data, n); err != nil {
		return err
	}
	spec, err := h.writeTextJob(textJob{Name: "bench-gpu-text", Data: data, Model: modelPath, Tokenizer: tokPath,
		Device: g.dev, Batch: batchSize, Out: filepath.Join(h.cfg.work, "out", "gpu-text")})
	if err != nil {
		return err
	}
	var st runStats
	busy, err := g.busy(func() error {
		var err error
		st, err = h.runPrecog(ctx, spec, filepath.Join(h.cfg.work, "state-gpu-text"), nil)
		return err
	})
	if err != nil {
		return err
	}
	raw := 0.0
	rawBusy, err := g.busy(func() error {
		for _, c := range []rawConfig{{sessions: 1, device: g.dev}, {sessions: 2, device: g.dev}} {
			rps, err := h.rawTextORTWith(modelPath, tok, min(n, textSample), c)
			if err != nil {
				return fmt.Errorf("%s: %w", c, err)
			}
			slog.Info("raw ORT CUDA (text)", "config", c.String(), "rows_per_s", int64(rps))
			raw = max(raw, rps)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("raw ORT CUDA: %w", err)
	}
	g.s.add(atLeast(fmt.Sprintf("text job on %s (%d titles, %s): run rows/s after start-up vs raw ORT CUDA on the same buckets (token-sized buckets of %d-row batches, %s)",
		g.dev, st.RowsIn, busyText(busy), batchSize, busyText(rawBusy)), st.WorkRPS, raw, "rows/s", 0.9))
	g.s.note("text on %s: stage busy time %s.", g.dev, st.Stages)
	if err := g.torch(ctx, st, modelPath, tokPath, data); err != nil {
		return err
	}
	g.minilm(ctx, tokPath, data)
	return nil
}

// torch runs the PyTorch loop in fp32 and TF32 where python3 has torch
// with CUDA, and compares the text job with the TF32 one (ONNX Runtime's
// precision by default).
func (g *gpuBench) torch(ctx context.Context, st runStats, modelPath, tokPath, data string) error {
	check := exec.CommandContext(ctx, "python3", "-c", "import torch, onnx, tokenizers, pyarrow; assert torch.cuda.is_available()")
	if out, err := check.CombinedOutput(); err != nil {
		g.s.note("PyTorch loop skipped: no python3 with torch (CUDA), onnx, tokenizers and pyarrow here (%v: %s)", err, tail(strings.TrimSpace(string(out)), 200))
		return nil
	}
	script := filepath.Join(g.h.cfg.work, "torchloop.py")
	if err := os.WriteFile(script, torchLoop, 0o644); err != nil {
		return err
	}
	for _, prec := range []string{"tf32", "fp32"} {
		var res struct {
			Rows      int64   `json:"rows"`
			RowsPerS  float64 `json:"rows_per_s"`
			Precision string  `json:"precision"`
		}
		var out []byte
		busy, err := g.busy(func() error {
			cmd := exec.CommandContext(ctx, "python3", script, "embedder", modelPath, tokPath, data, fmt.Sprint(textMaxLen), fmt.Sprint(batchSize), prec)
			var err error
			if out, err = cmd.Output(); err != nil {
				return fmt.Errorf("python3 %s: %w", filepath.Base(script), err)
			}
			return json.Unmarshal(lastLine(out), &res)
		})
		if err != nil {
			return err
		}
		r := atLeast(fmt.Sprintf("text job on %s vs a PyTorch loop (%s, all titles length-sorted, batches of %d, pooling and l2 on the GPU, tokenization included, %s)",
			g.dev, prec, batchSize, busyText(busy)), st.WorkRPS, res.RowsPerS, "rows/s", 1.0)
		if prec != "tf32" {
			r.Target, r.Verdict = "report", "—" // another precision than ONNX Runtime's
		}
		g.s.add(r)
	}
	return nil
}

// lastLine is the last non-empty line of out.
func lastLine(out []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	return lines[len(lines)-1]
}
