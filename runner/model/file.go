package model

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"github.com/precog-ml/precog/internal/objstore"
	"github.com/precog-ml/precog/jobs"
)

// EnvMaxModelBytes names the environment variable that overrides
// DefaultMaxModelBytes, for the rare model that is legitimately larger.
const EnvMaxModelBytes = "PRECOG_MAX_MODEL_BYTES"

// DefaultMaxModelBytes bounds the size of a model file: the whole file is
// read into memory, and a single ONNX protobuf cannot exceed 2 GiB anyway.
const DefaultMaxModelBytes int64 = 2 << 30

// maxModelBytes is the size limit in force: EnvMaxModelBytes when set.
func maxModelBytes() (int64, error) {
	v := os.Getenv(EnvMaxModelBytes)
	if v == "" {
		return DefaultMaxModelBytes, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive number of bytes", EnvMaxModelBytes, v)
	}
	return n, nil
}

// readModelFile reads a model file, refusing anything that is not a regular
// file (a FIFO would block forever, /dev/zero would never end) or that is
// larger than the limit. The file is opened non-blocking and checked on the
// open descriptor, so a FIFO is refused at once, with no writer needed.
func readModelFile(path string) ([]byte, error) {
	limit, err := maxModelBytes()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read model: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read model: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s); a model must be an .onnx file", path, modeName(st.Mode()))
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, larger than the %d byte limit (raise it with %s)", path, st.Size(), limit, EnvMaxModelBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read model %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		// The file grew while being read.
		return nil, fmt.Errorf("%s: larger than the %d byte limit (raise it with %s)", path, limit, EnvMaxModelBytes)
	}
	return data, nil
}

// modeName says what kind of file a mode is, for error text.
func modeName(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

// localFiles is spec with its model and tokenizer paths that are
// object-store URLs replaced by local copies from the object cache.
func localFiles(spec jobs.ModelSpec) (jobs.ModelSpec, error) {
	ctx := context.Background() // every object-store call has its own timeout
	p, err := objstore.LocalFile(ctx, spec.Path)
	if err != nil {
		return spec, err
	}
	spec.Path = p
	if len(spec.Inputs) == 0 {
		return spec, nil
	}
	inputs := make(map[string]jobs.InputSpec, len(spec.Inputs))
	for name, in := range spec.Inputs {
		if in.Tokenizer != "" {
			t, err := objstore.LocalFile(ctx, in.Tokenizer)
			if err != nil {
				return spec, fmt.Errorf("model.inputs.%s.tokenizer: %w", name, err)
			}
			in.Tokenizer = t
		}
		inputs[name] = in
	}
	spec.Inputs = inputs
	return spec, nil
}
