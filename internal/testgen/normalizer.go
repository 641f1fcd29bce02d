package testgen

import (
	"fmt"
	"os"
	"path/filepath"
)

// NormalizerModelName is the name (and file stem) of NormalizerModel's model.
const NormalizerModelName = "string_normalizer"

// NormalizerModel returns `string_normalizer`: a tensor(string) input
// `text` [N] → StringNormalizer (lower case, the en_US.UTF-8 locale ONNX
// Runtime defaults to on Linux) → `lower` string [N]. ONNX Runtime builds
// that locale for the operator: the model fails where the locale is not
// installed, which is what it tests.
func NormalizerModel() ([]byte, error) {
	g := NewGraph(NormalizerModelName)
	g.Input("text", String, -1, 1)
	// StringNormalizer takes [C] or [1, C]: the rows' column, flattened.
	g.InitializerInt64("flat", []int64{1}, []int64{-1})
	g.Node("Reshape", []string{"text", "flat"}, []string{"texts"})
	g.Node("StringNormalizer", []string{"texts"}, []string{"lower"},
		AttrString("case_change_action", "LOWER"), AttrString("locale", "en_US.UTF-8"))
	g.Output("lower", String, -1)
	b, err := NewModelProto(g).Marshal()
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", NormalizerModelName, err)
	}
	return b, nil
}

// WriteNormalizerModel writes NormalizerModel to dir and returns its path.
func WriteNormalizerModel(dir string) (string, error) {
	b, err := NormalizerModel()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, NormalizerModelName+".onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", fmt.Errorf("model %s: %w", NormalizerModelName, err)
	}
	return path, nil
}
