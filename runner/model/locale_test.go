package model

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/precog-ml/precog/internal/testgen"
	"github.com/precog-ml/precog/jobs"
)

func normalizerSpec(t *testing.T) jobs.ModelSpec {
	t.Helper()
	path, err := testgen.WriteNormalizerModel(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return jobs.ModelSpec{
		Path:    path,
		Inputs:  map[string]jobs.InputSpec{"text": {Columns: []string{"text"}}},
		Outputs: map[string]string{"lower": "lower"},
	}
}

// TestStringNormalizerModel runs a StringNormalizer model (ONNX Runtime
// builds the en_US.UTF-8 locale for it): the set-up the README names
// (scripts/install-servers.sh) installs that locale, so string models work
// on a fresh Debian machine.
func TestStringNormalizerModel(t *testing.T) {
	m := loadModel(t, normalizerSpec(t))
	texts := []string{"Hello", "KÖLN", "already lower", ""}
	schema := arrow.NewSchema([]arrow.Field{{Name: "text", Type: arrow.BinaryTypes.String}}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	for _, s := range texts {
		rb.Field(0).(*array.StringBuilder).Append(s)
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	if err := m.CheckSchema(schema); err != nil {
		t.Fatal(err)
	}
	_, out := infer(t, m, rec)
	col := out.Column(0).(*array.String)
	for i, s := range texts {
		if got := col.Value(i); got != strings.ToLower(s) {
			t.Errorf("row %d: %q, want %q", i, got, strings.ToLower(s))
		}
	}
}

// TestMissingLocaleSaysWhatToInstall: where the locale is missing (LOCPATH
// at an empty directory hides the installed ones from glibc), loading a
// StringNormalizer model fails naming the locale and the commands that
// install it, not only ONNX Runtime's "install necessary language-pack-XX".
func TestMissingLocaleSaysWhatToInstall(t *testing.T) {
	t.Setenv("LOCPATH", t.TempDir())
	_, err := Load(normalizerSpec(t), "job.yaml")
	if err == nil {
		t.Fatal("loaded a StringNormalizer model without the en_US.UTF-8 locale")
	}
	for _, want := range []string{"en_US.UTF-8 locale", "apt-get install locales", "localedef -i en_US -c -f UTF-8 en_US.UTF-8", "locale-gen"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
