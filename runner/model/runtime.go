// Package model runs ONNX models with ONNX Runtime (yalue/onnxruntime_go):
// it loads a model, checks the job spec's input/output mapping against the
// model and the source schema before any data is read, converts Arrow record
// batches into input tensors (rejecting rows with null or non-finite
// features), runs a pool of sessions per device and converts the outputs back
// into Arrow records.
package model

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

// EnvLibrary names the environment variable that points at the ONNX Runtime
// shared library (libonnxruntime.so.1), as fetched by `make ort`.
const EnvLibrary = "PRECOG_ORT_LIB"

// libraryName is what the system loader is asked for when nothing better is
// found.
const libraryName = "libonnxruntime.so.1"

// cacheGlob is where `make ort` caches the library, relative to the
// repository root.
const cacheGlob = ".cache/onnxruntime-node-*/" + libraryName

var (
	initOnce sync.Once
	initErr  error
	initPath string
)

// Init loads the ONNX Runtime shared library and creates the process-wide
// runtime environment. It runs once per process; later calls return the
// first call's result, because onnxruntime_go cannot load a second library
// into the same process.
//
// The library is, in order: the file named by PRECOG_ORT_LIB; the first
// .cache/onnxruntime-node-*/libonnxruntime.so.1 found in the working
// directory or a parent of it, or next to the executable (bin/../.cache);
// else libonnxruntime.so.1 for the system loader.
func Init() error {
	initOnce.Do(func() {
		initPath = findLibrary()
		initErr = load(initPath)
	})
	return initErr
}

// LibraryPath reports the library Init loads (or loaded), for logs and
// `precog inspect`.
func LibraryPath() string {
	if initPath != "" {
		return initPath
	}
	return findLibrary()
}

// findLibrary applies Init's search order.
func findLibrary() string {
	if p := os.Getenv(EnvLibrary); p != "" {
		return p
	}
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			dirs = append(dirs, d)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		dir := filepath.Dir(exe)
		dirs = append(dirs, filepath.Dir(dir), dir)
	}
	for _, d := range dirs {
		matches, _ := filepath.Glob(filepath.Join(d, cacheGlob))
		sort.Strings(matches)
		for i := len(matches) - 1; i >= 0; i-- {
			if st, err := os.Stat(matches[i]); err == nil && st.Mode().IsRegular() {
				return matches[i]
			}
		}
	}
	return libraryName
}

func load(path string) error {
	hint := fmt.Sprintf("set %s to the library from `make ort`", EnvLibrary)
	if path != libraryName {
		st, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("onnx runtime: load %s (%s): %w", path, hint, err)
		}
		if st.IsDir() {
			return fmt.Errorf("onnx runtime: load %s (%s): is a directory", path, hint)
		}
	}
	ort.SetSharedLibraryPath(path)
	quietTelemetry()
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return fmt.Errorf("onnx runtime: load %s (%s): %w", path, hint, err)
	}
	return nil
}

// EnvTelemetry is ONNX Runtime's own switch for its telemetry.
const EnvTelemetry = "ORT_DISABLE_TELEMETRY"

// quietTelemetry turns ONNX Runtime's telemetry off unless the environment
// already says either way. ORT 1.29's Linux build starts a telemetry system
// in every process that creates an environment: a SQLite database under
// ~/.cache/Microsoft/DeveloperTools (opened, written and fsynced at each
// start) and HTTPS uploads wherever a CA bundle is found. A batch worker has
// no business phoning home, and the start-up cost (5 ms of CPU per process,
// 2 loaded cores) was 8% of a null-model job's start. ORT reads the variable
// with getenv when the environment is created; os.Setenv reaches the C
// environment in a cgo binary.
func quietTelemetry() {
	if _, set := os.LookupEnv(EnvTelemetry); !set {
		os.Setenv(EnvTelemetry, "1")
	}
}

// RuntimeVersion loads the ONNX Runtime library (Init) and reports its
// version string, e.g. "1.29.0", for `precog --version` and bug reports.
func RuntimeVersion() (string, error) {
	if err := Init(); err != nil {
		return "", err
	}
	return ort.GetVersion(), nil
}
