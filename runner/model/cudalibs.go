package model

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// precogProbe opens name as ONNX Runtime's provider would (the loader's
// search path: LD_LIBRARY_PATH, the ld.so cache, the default directories),
// closes it again, and returns NULL or the loader's message.
static const char *precogProbe(const char *name) {
	void *h = dlopen(name, RTLD_LAZY | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		return e ? e : "not found";
	}
	dlclose(h);
	return NULL;
}
*/
import "C"

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	ort "github.com/yalue/onnxruntime_go"
)

// cudaProviderName is ONNX Runtime's CUDA execution provider, which its core
// library loads from its own directory (`make ort-gpu` puts it there).
const cudaProviderName = "libonnxruntime_providers_cuda.so"

// cudaRuntimeLibs are libraries the CUDA provider opens itself when it first
// needs them (they are not in its DT_NEEDED): cuDNN for convolutions and
// attention, cuFFT. Missing, the provider loads and fails later.
var cudaRuntimeLibs = []string{"libcudnn.so.9"}

// cudaProviderPath is where the core library at lib looks for the provider.
func cudaProviderPath(lib string) string {
	return filepath.Join(filepath.Dir(lib), cudaProviderName)
}

// missingLibraries lists the shared libraries that the ELF file at path
// links against (DT_NEEDED) and the loader cannot open, in link order, each
// with the loader's reason; its own DT_RUNPATH/DT_RPATH directories ($ORIGIN
// too) count as found.
func missingLibraries(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("%s: read DT_NEEDED: %w", path, err)
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(path)))
			}
		}
	}
	var missing []string
	for _, name := range needed {
		if inDirs(dirs, name) {
			continue
		}
		if why := probeLibrary(name); why != "" {
			missing = append(missing, name)
		}
	}
	return missing, nil
}

func inDirs(dirs []string, name string) bool {
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, name)); err == nil && !st.IsDir() {
			return true
		}
	}
	return false
}

// probeLibrary returns "" when the loader can open name, else its message.
func probeLibrary(name string) string {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	if e := C.precogProbe(cs); e != nil {
		return C.GoString(e)
	}
	return ""
}

// cudaLibraryError explains why cuda:device cannot be used with the core
// library at lib when its CUDA provider is there: the CUDA libraries it
// needs that the loader cannot find, by name. It returns nil when the
// provider is absent (today's "no CUDA execution provider" error stands) or
// nothing it links against is missing.
func cudaLibraryError(device int, lib string) error {
	prov := cudaProviderPath(lib)
	if _, err := os.Stat(prov); err != nil {
		return nil
	}
	missing, err := missingLibraries(prov)
	if err != nil {
		return fmt.Errorf("cuda:%d: ONNX Runtime's CUDA provider %s is unreadable: %w", device, prov, err)
	}
	var later []string
	for _, name := range cudaRuntimeLibs {
		if probeLibrary(name) != "" {
			later = append(later, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	msg := fmt.Sprintf("cuda:%d: ONNX Runtime's CUDA provider (%s) needs %s, which the loader cannot find", device, prov, strings.Join(missing, ", "))
	if len(later) > 0 {
		msg += fmt.Sprintf(" (and %s, which it opens at run time)", strings.Join(later, ", "))
	}
	return fmt.Errorf("%s: install CUDA 13 and cuDNN 9 and put their lib directories on LD_LIBRARY_PATH (docs/gpu.md)", msg)
}

// AppendDevice adds the execution provider of dev to opts: nothing for
// "" or "cpu", CUDA for "cuda:N", as the model's own sessions do (for raw
// ONNX Runtime loops that build their sessions themselves: the bench).
func AppendDevice(opts *ort.SessionOptions, dev string) error {
	cuda, err := parseDevice(dev)
	if err != nil || cuda < 0 {
		return err
	}
	return appendCUDA(opts, cuda)
}
