package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/precog-ml/precog/internal/testgen"
)

type fixture struct {
	Sha256 string `json:"tokenizer_sha256"`
	Cases  []struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	} `json:"cases"`
}

func loadFixture(t *testing.T, raw []byte, name string) (*Tokenizer, fixture) {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	if hex.EncodeToString(sum[:]) != f.Sha256 {
		t.Fatalf("testgen's tokenizer.json changed since testdata/%s was made: regenerate it (scripts/tokref/gen.mjs)", name)
	}
	tok, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return tok, f
}

// TestMatchesReference: ids equal @huggingface/tokenizers' on a varied
// corpus (accents, CJK, emoji, control and zero-width characters, no-break
// spaces, contractions, runs of spaces, over-long words, special tokens in
// the text, empty and very long text), untruncated and truncated to several
// lengths, for a BERT WordPiece and a RoBERTa byte-level BPE tokenizer.
func TestMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name, fixture, kind string
		json                func() ([]byte, error)
		vocab               int
	}{
		{"wordpiece", "bert_ids.json", "WordPiece", testgen.BertTokenizerJSON, len(testgen.BertVocab())},
		{"bpe", "bpe_ids.json", "BPE (byte-level)", testgen.BPETokenizerJSON, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := tc.json()
			if err != nil {
				t.Fatal(err)
			}
			tok, f := loadFixture(t, raw, tc.fixture)
			if len(f.Cases) < 20 {
				t.Fatalf("%d cases", len(f.Cases))
			}
			for _, c := range f.Cases {
				got := tok.Encode(nil, c.Text, 0)
				if !slices.Equal(got, c.IDs) {
					t.Errorf("%q:\n got %v\nwant %v", c.Text, got, c.IDs)
					continue
				}
				// Truncation keeps the first max-2 text ids and the closing token.
				for _, max := range []int{2, 3, 8, 128} {
					want := c.IDs
					if len(want) > max {
						want = append(slices.Clone(want[:max-1]), want[len(want)-1])
					}
					if got := tok.Encode(nil, c.Text, max); !slices.Equal(got, want) {
						t.Errorf("%q max_length %d:\n got %v\nwant %v", c.Text, max, got, want)
					}
				}
			}
			if tok.Kind() != tc.kind || (tc.vocab > 0 && tok.VocabSize() != tc.vocab) {
				t.Errorf("kind %s, vocab %d", tok.Kind(), tok.VocabSize())
			}
		})
	}
}

// TestUnsupported: other tokenizer kinds are refused, naming what is not
// supported.
func TestUnsupported(t *testing.T) {
	raw, _ := testgen.BertTokenizerJSON()
	for _, tc := range []struct{ from, to, want string }{
		{`"type": "WordPiece"`, `"type": "Unigram"`, `model type "Unigram" is not supported`},
		{`"type": "WordPiece"`, `"type": "BPE"`, `model: BPE without merges`},
		{`"type": "BertNormalizer"`, `"type": "NFKC"`, `normalizer: type "NFKC" is not supported`},
		{`"type": "BertPreTokenizer"`, `"type": "ByteLevel"`, `pre_tokenizer: type "ByteLevel" is not supported`},
		{`"unk_token": "[UNK]"`, `"unk_token": "<unk>"`, `unk_token "<unk>" is not in the vocabulary`},
	} {
		s := strings.ReplaceAll(string(raw), tc.from, tc.to)
		if _, err := Parse([]byte(s)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.to, err, tc.want)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	raw, _ := testgen.BertTokenizerJSON()
	tok, _ := Parse(raw)
	text := "Wireless headset with USB-C charger, the best running shoes for 2026 (blue & white) — café edition"
	var dst []int32
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		dst = tok.Encode(dst[:0], text, 256)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
