package lookup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLoadTokens: the environment's tokens, then the file's (comments and
// blank lines ignored); no file is the environment's alone; a missing or
// empty file is an error.
func TestLoadTokens(t *testing.T) {
	t.Setenv("PRECOG_API_TOKENS", "a, b")
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens")
	if err := os.WriteFile(file, []byte("# ops\nc\n\n d \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadTokens(file); err != nil || !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("LoadTokens(file) = %v, %v", got, err)
	}
	if got, err := LoadTokens(""); err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("LoadTokens(\"\") = %v, %v", got, err)
	}
	if _, err := LoadTokens(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "tokens file") {
		t.Errorf("a missing file: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokens(empty); err == nil || !strings.Contains(err.Error(), "no tokens") {
		t.Errorf("an empty file: %v", err)
	}
}
