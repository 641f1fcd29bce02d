package model

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/precog-ml/precog/jobs"
)

// SmallModelFLOPs is the FLOPs per row below which a model is likely no
// faster on a GPU than on the same machine's CPU: every batch pays for the
// copies to and from the device and for kernel launches, and a small model
// leaves the GPU idle between them. Measured on an H200 with 16 cores
// (issue 33): the ranker (2 kFLOP per row) and the embedder (25 kFLOP) ran
// slower on cuda:0 than on the CPU (2.25M vs 3.65M, 746k vs 928k rows/s);
// heavy (4.2 MFLOP) ran 6x faster. One MFLOP lies between.
const SmallModelFLOPs = 1_000_000

// weightOps are the operators whose weights (an initializer input) are
// multiplied with every row: each weight costs a multiply and an add per
// row (per token of a [N, T, ...] input, per output position of a Conv).
var weightOps = map[string]bool{
	"MatMul": true, "Gemm": true, "Conv": true, "ConvTranspose": true,
	"MatMulInteger": true, "QLinearMatMul": true, "QLinearConv": true,
	"FusedMatMul": true, "Attention": true,
}

// estimateFLOPs estimates the floating-point operations per row (per token
// for a model whose rows are token sequences) of the ONNX model in data: 2
// for each weight that a MatMul, Gemm or Conv multiplies with its input.
// Products of two activations (attention scores) and elementwise ops are
// left out, so the estimate errs low, which is the side that a warning
// about small models may err on.
func estimateFLOPs(data []byte) (int64, error) {
	var graph []byte
	if err := walk(data, func(f field) error {
		if f.num == fModelGraph && f.typ == protowire.BytesType {
			graph = f.data
		}
		return nil
	}); err != nil {
		return 0, err
	}
	sizes := map[string]int64{} // initializer name → element count
	var weights []string        // initializer inputs of weightOps, with repeats
	err := walk(graph, func(f field) error {
		if f.typ != protowire.BytesType {
			return nil
		}
		switch f.num {
		case fGraphInitializer:
			name, n, err := tensorSize(f.data)
			if err != nil {
				return err
			}
			sizes[name] = n
		case fGraphNode:
			var op string
			var ins []string
			if err := walk(f.data, func(n field) error {
				switch {
				case n.num == fNodeOpType && n.typ == protowire.BytesType:
					op = string(n.data)
				case n.num == fNodeInput && n.typ == protowire.BytesType:
					ins = append(ins, string(n.data))
				}
				return nil
			}); err != nil {
				return err
			}
			if weightOps[op] {
				weights = append(weights, ins...)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("graph: %w", err)
	}
	var flops int64
	for _, w := range weights {
		if n, ok := sizes[w]; ok && n > 1 {
			flops += 2 * n
		}
	}
	return flops, nil
}

// tensorSize reads a TensorProto's name and element count (the product of
// its dims, packed or not).
func tensorSize(b []byte) (string, int64, error) {
	var name string
	n := int64(1)
	err := walk(b, func(f field) error {
		switch {
		case f.num == fTensorName && f.typ == protowire.BytesType:
			name = string(f.data)
		case f.num == fTensorDims && f.typ == protowire.VarintType:
			n *= int64(f.v)
		case f.num == fTensorDims && f.typ == protowire.BytesType:
			for p := f.data; len(p) > 0; {
				v, k := protowire.ConsumeVarint(p)
				if k < 0 {
					return protowire.ParseError(k)
				}
				n *= int64(v)
				p = p[k:]
			}
		}
		return nil
	})
	return name, n, err
}

// rowsOfTokens is how many tokens a row of the spec's model runs over at
// most: the longest max_length of its text inputs, 1 without text.
func rowsOfTokens(spec jobs.ModelSpec) int64 {
	t := int64(1)
	for _, in := range spec.Inputs {
		if len(in.Text) == 0 {
			continue
		}
		ml := int64(in.MaxLength)
		if ml <= 0 {
			ml = jobs.DefaultMaxLength
		}
		t = max(t, ml)
	}
	return t
}

// SmallModelWarning reads the spec's model and returns a warning when the
// spec runs it on a GPU (device cuda:N) and its estimated FLOPs per row are
// below SmallModelFLOPs; "" otherwise (and for cpu). It needs no ONNX
// Runtime, so `precog validate` says it even where CUDA is missing.
func SmallModelWarning(spec jobs.ModelSpec) (string, error) {
	cuda, err := parseDevice(spec.Device)
	if err != nil || cuda < 0 {
		return "", nil // a bad device is Load's error to report
	}
	data, err := readModelFile(spec.Path)
	if err != nil {
		return "", err
	}
	flops, err := estimateFLOPs(data)
	if err != nil {
		return "", fmt.Errorf("%s: not an ONNX model: %w", spec.Path, err)
	}
	flops *= rowsOfTokens(spec)
	if flops >= SmallModelFLOPs {
		return "", nil
	}
	return fmt.Sprintf("model %s is small for a GPU: about %s per row (below %s), so on %s the copies to and from the device and the kernel launches cost more than the model; the same machine's CPU is likely as fast or faster (device: cpu, or a CPU pool)",
		spec.Path, humanFLOPs(flops), humanFLOPs(SmallModelFLOPs), spec.Device), nil
}

// humanFLOPs renders 2176 as "2.2 kFLOP".
func humanFLOPs(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1f GFLOP", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MFLOP", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kFLOP", float64(n)/1e3)
	default:
		return fmt.Sprintf("%d FLOP", n)
	}
}
