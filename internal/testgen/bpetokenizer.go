package testgen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// byteLevelAlphabet is GPT-2's bytes_to_unicode: printable Latin-1 bytes
// map to themselves, the others to U+0100 and up, so every byte is one
// visible rune ("Ġ" is the space).
func byteLevelAlphabet() [256]rune {
	var m [256]rune
	n := 0
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

// bpeCorpus trains the generated BPE tokenizer's merges.
var bpeCorpus = []string{
	"the quick brown fox jumps over the lazy dog", "the red shoes and the blue shirts",
	"running shoes for the running season", "wireless headset with charger", "coffee and tea in the cafe",
	"the phone case", "phone cases", "the best phones of the year", "it's the dog's toy", "they're running",
}

// BPETokenizerJSON is a small RoBERTa-style byte-level BPE tokenizer.json:
// the ByteLevel pre-tokenizer (GPT-2's split regex), all 256 byte symbols
// plus 120 merges trained on a fixed corpus, <s> … </s> around the text
// (RobertaProcessing).
func BPETokenizerJSON() ([]byte, error) {
	alpha := byteLevelAlphabet()
	vocab := map[string]int{"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
	add := func(s string) {
		if _, ok := vocab[s]; !ok {
			vocab[s] = len(vocab)
		}
	}
	for b := range 256 {
		add(string(alpha[b]))
	}
	// Words as symbol lists, "Ġ" marking a leading space, as ByteLevel does.
	var words [][]string
	for _, line := range bpeCorpus {
		for i, w := range strings.Fields(line) {
			if i > 0 {
				w = " " + w
			}
			var syms []string
			for _, b := range []byte(w) {
				syms = append(syms, string(alpha[b]))
			}
			words = append(words, syms)
		}
	}
	var merges []string
	for range 120 {
		counts := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w); i++ {
				counts[[2]string{w[i], w[i+1]}]++
			}
		}
		var best [2]string
		bestN := 0
		for p, n := range counts {
			if n > bestN || (n == bestN && (p[0]+" "+p[1]) < (best[0]+" "+best[1])) {
				best, bestN = p, n
			}
		}
		if bestN < 2 {
			break
		}
		merges = append(merges, best[0]+" "+best[1])
		add(best[0] + best[1])
		for k, w := range words {
			var out []string
			for i := 0; i < len(w); i++ {
				if i+1 < len(w) && w[i] == best[0] && w[i+1] == best[1] {
					out = append(out, best[0]+best[1])
					i++
					continue
				}
				out = append(out, w[i])
			}
			words[k] = out
		}
	}
	special := func(id int, s string) map[string]any {
		return map[string]any{"id": id, "content": s, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
	}
	doc := map[string]any{
		"version":       "1.0",
		"truncation":    nil,
		"padding":       nil,
		"added_tokens":  []any{special(0, "<s>"), special(1, "<pad>"), special(2, "</s>"), special(3, "<unk>")},
		"normalizer":    nil,
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		"post_processor": map[string]any{"type": "RobertaProcessing", "sep": []any{"</s>", 2}, "cls": []any{"<s>", 0},
			"trim_offsets": true, "add_prefix_space": false},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges},
	}
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return nil, fmt.Errorf("bpe tokenizer.json: %w", err)
	}
	return b, nil
}

// WriteBPETokenizer writes BPETokenizerJSON to dir/tokenizer.json.
func WriteBPETokenizer(dir string) (string, error) {
	b, err := BPETokenizerJSON()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "tokenizer.json")
	return path, os.WriteFile(path, b, 0o644)
}
