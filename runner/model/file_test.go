package model

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadErr runs Load on path in the background, failing the test when it
// has not returned within a few seconds (a FIFO used to block forever).
func loadErr(t *testing.T, path string) (loadErr, inspectErr error) {
	t.Helper()
	spec := specFor(t, "ranker")
	spec.Path = path
	done := make(chan struct{})
	go func() {
		defer close(done)
		if m, err := Load(spec, "job.yaml"); err == nil {
			m.Close()
		} else {
			loadErr = err
		}
		_, inspectErr = Inspect(path)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("Load/Inspect(%s) still blocked after 5s", path)
	}
	return loadErr, inspectErr
}

func TestModelFileMustBeRegular(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "model.onnx")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, kind string }{
		{fifo, "a named pipe"},
		{"/dev/zero", "a character device"},
		{t.TempDir(), "a directory"},
	} {
		lerr, ierr := loadErr(t, tc.path)
		want := tc.path + ": not a regular file (" + tc.kind + ")"
		if lerr == nil || !strings.Contains(lerr.Error(), "job.yaml: model.path: "+want) {
			t.Errorf("Load(%s) = %v, want error containing %q", tc.path, lerr, "job.yaml: model.path: "+want)
		}
		if ierr == nil || !strings.Contains(ierr.Error(), want) {
			t.Errorf("Inspect(%s) = %v, want error containing %q", tc.path, ierr, want)
		}
	}
}

func TestModelFileSizeLimit(t *testing.T) {
	path := modelPath(t, "ranker")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvMaxModelBytes, "100")
	lerr, ierr := loadErr(t, path)
	want := "larger than the 100 byte limit (raise it with " + EnvMaxModelBytes + ")"
	for _, err := range []error{lerr, ierr} {
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
			t.Errorf("with a 100 byte limit: %v, want error naming %s and containing %q", err, path, want)
		}
	}
	if lerr != nil && !strings.Contains(lerr.Error(), "model.path") {
		t.Errorf("Load error %v does not name model.path", lerr)
	}
	// At exactly the file's size the model loads.
	t.Setenv(EnvMaxModelBytes, strconv.FormatInt(st.Size(), 10))
	if lerr, ierr := loadErr(t, path); lerr != nil || ierr != nil {
		t.Errorf("limit = file size: Load %v, Inspect %v", lerr, ierr)
	}
	t.Setenv(EnvMaxModelBytes, "lots")
	if lerr, _ := loadErr(t, path); lerr == nil || !strings.Contains(lerr.Error(), EnvMaxModelBytes+`="lots"`) {
		t.Errorf("bad limit: %v", lerr)
	}
}

func TestRuntimeVersion(t *testing.T) {
	v, err := RuntimeVersion()
	if err != nil {
		t.Fatal(err)
	}
	// The library make ort fetches is onnxruntime-node-X.Y.Z: its version
	// is in its directory name.
	if dir := filepath.Base(filepath.Dir(LibraryPath())); !strings.HasSuffix(dir, "-"+v) || strings.Count(v, ".") != 2 {
		t.Errorf("RuntimeVersion = %q, library %s", v, LibraryPath())
	}
}
