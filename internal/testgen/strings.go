package testgen

import (
	"fmt"
	"os"
	"path/filepath"
)

// StringModel is `string_input`, shaped like a scikit-learn pipeline over
// categorical features: a tensor(string) input `cat` [N,2] (country,
// device) → ai.onnx.ml LabelEncoder to float codes → Gemm → `score`
// float [N,1]; and Gather(country) → LabelEncoder to a region name →
// `region` string [N]. Reference computes both in pure Go.
type StringModel struct {
	Name string
	// Countries and Devices are the known categories; any other value
	// encodes as -1 (LabelEncoder's default_float) and region "other".
	Countries, Devices []string

	codes   map[string]float32
	regions map[string]string
	l       dense
}

// StringModelOther is the region of a country the model does not know.
const StringModelOther = "other"

// NewStringModel returns `string_input` with weights from seed.
func NewStringModel(seed uint64) *StringModel {
	m := &StringModel{
		Name:      "string_input",
		Countries: []string{"de", "fr", "jp", "us", "br", "Köln"},
		Devices:   []string{"ios", "android", "web"},
		codes:     map[string]float32{},
		regions:   map[string]string{},
		l:         newDense(rng(seed, "string_input"), 2, 1),
	}
	region := []string{"eu", "eu", "apac", "na", "latam", "eu"}
	for i, c := range m.Countries {
		m.codes[c] = float32(i+1) * 0.5
		m.regions[c] = region[i]
	}
	for i, d := range m.Devices {
		m.codes[d] = -float32(i+1) * 0.25
	}
	return m
}

// ONNX returns the encoded model.
func (m *StringModel) ONNX() ([]byte, error) {
	g := NewGraph(m.Name)
	g.Input("cat", String, -1, 2)
	keys := append(append([]string(nil), m.Countries...), m.Devices...)
	vals := make([]float32, len(keys))
	for i, k := range keys {
		vals[i] = m.codes[k]
	}
	g.NodeDomain(MLDomain, "LabelEncoder", []string{"cat"}, []string{"codes"},
		AttrStrings("keys_strings", keys...), AttrFloats("values_floats", vals...), AttrFloat("default_float", -1))
	y := m.l.gemm(g, "l1", "codes")
	g.Node("Identity", []string{y}, []string{"score"})
	g.InitializerInt64("country_idx", []int64{}, []int64{0})
	g.Node("Gather", []string{"cat", "country_idx"}, []string{"country"}, AttrInt("axis", 1))
	regions := make([]string, len(m.Countries))
	for i, c := range m.Countries {
		regions[i] = m.regions[c]
	}
	g.NodeDomain(MLDomain, "LabelEncoder", []string{"country"}, []string{"region"},
		AttrStrings("keys_strings", m.Countries...), AttrStrings("values_strings", regions...), AttrString("default_string", StringModelOther))
	g.Output("score", Float, -1, 1)
	g.Output("region", String, -1)
	b, err := NewModelProto(g).Marshal()
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Name, err)
	}
	return b, nil
}

// Write writes the model to dir/string_input.onnx and returns the path.
func (m *StringModel) Write(dir string) (string, error) {
	b, err := m.ONNX()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("model %s: %w", m.Name, err)
	}
	path := filepath.Join(dir, m.Name+".onnx")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", fmt.Errorf("model %s: %w", m.Name, err)
	}
	return path, nil
}

// Reference is the model's score and region for one row.
func (m *StringModel) Reference(country, device string) (score float32, region string) {
	code := func(s string) float32 {
		if v, ok := m.codes[s]; ok {
			return v
		}
		return -1
	}
	score = m.l.apply([]float32{code(country), code(device)}, 1)[0]
	region, ok := m.regions[country]
	if !ok {
		region = StringModelOther
	}
	return score, region
}
