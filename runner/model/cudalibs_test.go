package model

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gpuCoreLibrary finds the core library of `make ort-gpu` (the provider
// beside it) in a .cache above the working directory, or skips.
func gpuCoreLibrary(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		m, _ := filepath.Glob(filepath.Join(d, ".cache/onnxruntime-gpu-*/libonnxruntime.so.1"))
		for _, lib := range m {
			if _, err := os.Stat(cudaProviderPath(lib)); err == nil {
				return lib
			}
		}
		if filepath.Dir(d) == d {
			t.Skip("no ONNX Runtime with its CUDA provider in .cache (make ort-gpu)")
		}
	}
}

// TestCUDALibraryErrorNamesWhatIsMissing builds a stand-in provider linked
// against a library that is then removed, so the loader cannot find it:
// the error names it and not the libraries that are there.
func TestCUDALibraryErrorNamesWhatIsMissing(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build a stand-in provider")
	}
	dir, stub := t.TempDir(), t.TempDir()
	src := filepath.Join(stub, "x.c")
	if err := os.WriteFile(src, []byte("int precog_x(void) { return 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const gone = "libprecogtest_gone.so.13"
	build := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("cc %v: %v\n%s", args, err, out)
		}
	}
	build("-shared", "-fPIC", "-o", filepath.Join(stub, gone), "-Wl,-soname,"+gone, src)
	build("-shared", "-fPIC", "-o", filepath.Join(dir, cudaProviderName), src,
		"-Wl,--no-as-needed", "-L"+stub, "-l:"+gone, "-lm")
	if err := os.Remove(filepath.Join(stub, gone)); err != nil {
		t.Fatal(err)
	}
	core := filepath.Join(dir, libraryName)

	err = cudaLibraryError(3, core)
	if err == nil {
		t.Fatal("no error with a provider whose library is gone")
	}
	msg := err.Error()
	for _, want := range []string{"cuda:3", gone, filepath.Join(dir, cudaProviderName), "LD_LIBRARY_PATH"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
	if strings.Contains(msg, "libm.so.6") || strings.Contains(msg, "libc.so.6") {
		t.Errorf("error %q names a library the loader finds", msg)
	}

	// Without the provider, today's error stands (nil here).
	if err := cudaLibraryError(0, filepath.Join(t.TempDir(), libraryName)); err != nil {
		t.Fatalf("no provider: %v", err)
	}
}

// envCUDAErrorChild runs TestCUDAErrorNamesCUDALibrary's child: a process
// whose ONNX Runtime is the GPU build (Init loads one library per process).
const envCUDAErrorChild = "PRECOG_TEST_CUDA_ERROR_CHILD"

// TestCUDAErrorNamesCUDALibrary asks ONNX Runtime 1.29.0 with its real
// CUDA provider for cuda:0 where CUDA is not installed: the error names
// every CUDA library missing (libcublas.so.13, libcudart.so.13...), where
// ONNX Runtime's own message names only the first (libcublasLt.so.13).
func TestCUDAErrorNamesCUDALibrary(t *testing.T) {
	if lib := os.Getenv(envCUDAErrorChild); lib != "" {
		err := CheckDevice("cuda:0")
		if err == nil {
			t.Skip("cuda:0 works here")
		}
		t.Log(err)
		for _, want := range []string{"libcublas.so.13", "libcudart.so.13", "libcurand.so.10"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not name %s: %v", want, err)
			}
		}
		return
	}
	lib := gpuCoreLibrary(t)
	if probeLibrary("libcublas.so.13") == "" {
		t.Skip("CUDA 13 is installed here")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCUDAErrorNamesCUDALibrary$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), EnvLibrary+"="+lib, envCUDAErrorChild+"="+lib)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
