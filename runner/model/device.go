package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/precog-ml/precog/jobs"
)

// parseDevice reads "cpu" (or "") and "cuda:N"; cuda is -1 for cpu.
func parseDevice(dev string) (cuda int, err error) {
	switch {
	case dev == "" || dev == jobs.DeviceCPU:
		return -1, nil
	case strings.HasPrefix(dev, "cuda:"):
		n, err := strconv.Atoi(strings.TrimPrefix(dev, "cuda:"))
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not cpu or cuda:N (N a device number)", dev)
		}
		return n, nil
	default:
		return 0, fmt.Errorf("%q is not cpu or cuda:N", dev)
	}
}

// CheckDevice tells whether this process can run models on dev ("cpu",
// "cuda:N") before it takes any work: the name, the ONNX Runtime library,
// and for cuda:N that the library has the CUDA execution provider. A
// worker checks its --devices with it, so that a CPU-only build fails at
// start instead of failing the shards it claims.
func CheckDevice(dev string) error {
	cuda, err := parseDevice(dev)
	if err != nil {
		return err
	}
	if err := Init(); err != nil {
		return err
	}
	if cuda < 0 {
		return nil
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return fmt.Errorf("onnx runtime: session options: %w", err)
	}
	defer opts.Destroy()
	return appendCUDA(opts, cuda)
}

// CheckDevices reads a comma-separated list of devices (precog worker
// --devices: "cpu,cuda:0"), blanks ignored, and checks each with
// CheckDevice; the first that cannot run is the error, and so is a device
// listed twice.
func CheckDevices(list string) ([]string, error) {
	var out []string
	for _, d := range strings.Split(list, ",") {
		if d = strings.TrimSpace(d); d != "" {
			if err := CheckDevice(d); err != nil {
				return nil, err
			}
			if slices.Contains(out, d) {
				return nil, fmt.Errorf("%s is listed twice (each device runs --parallel shards at once)", d)
			}
			out = append(out, d)
		}
	}
	return out, nil
}

func appendCUDA(opts *ort.SessionOptions, device int) error {
	noCUDA := func(cause error) error {
		// With the provider beside the core, the usual cause is a CUDA
		// library the loader cannot find: name it.
		if err := cudaLibraryError(device, LibraryPath()); err != nil {
			return fmt.Errorf("%w (onnx runtime: %v)", err, cause)
		}
		return fmt.Errorf("cuda:%d requested but this ONNX Runtime build has no CUDA execution provider (%s): %w", device, LibraryPath(), cause)
	}
	co, err := ort.NewCUDAProviderOptions()
	if err != nil {
		return noCUDA(err)
	}
	defer co.Destroy()
	// Update is where a build without the CUDA provider libraries fails.
	if err := co.Update(map[string]string{"device_id": strconv.Itoa(device)}); err != nil {
		return noCUDA(err)
	}
	if err := opts.AppendExecutionProviderCUDA(co); err != nil {
		return noCUDA(err)
	}
	return nil
}
