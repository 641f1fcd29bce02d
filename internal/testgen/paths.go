package testgen

import (
	"fmt"
	"os"
	"path/filepath"
)

// DefaultORTLib is where `make ort` puts the ONNX Runtime shared library,
// relative to the module root.
const DefaultORTLib = ".cache/onnxruntime-node-1.29.0/libonnxruntime.so.1"

// ModuleRoot finds the directory holding go.mod by walking up from the working
// directory, so tests in any package can locate repository files.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("module root: no go.mod above the working directory")
		}
		dir = parent
	}
}

// ORTLibrary returns the ONNX Runtime shared library tests should load:
// $PRECOG_ORT_LIB when set, else DefaultORTLib under the module root. It is an
// error (tests must fail, not skip) when the file does not exist.
func ORTLibrary() (string, error) {
	path := os.Getenv("PRECOG_ORT_LIB")
	if path == "" {
		root, err := ModuleRoot()
		if err != nil {
			return "", err
		}
		path = filepath.Join(root, DefaultORTLib)
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("ONNX Runtime library %s: %w (run `make ort`, or set PRECOG_ORT_LIB)", path, err)
	}
	return path, nil
}
