package testgen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// BertTokenizerJSON is a small BERT-style HuggingFace tokenizer.json
// (BertNormalizer lowercasing and stripping accents, BertPreTokenizer,
// WordPiece with "##" continuations, [CLS] … [SEP]) whose vocabulary covers
// ASCII letters and digits, some whole words and suffixes, punctuation and
// a few CJK characters: enough for every WordPiece path (whole words,
// pieces, [UNK] for words no piece covers) on a small embedding model.
// It is generated, so tests need no download; scripts/tokref checks it
// against the reference implementation.
func BertTokenizerJSON() ([]byte, error) {
	vocab := BertVocab()
	ids := map[string]int{}
	for i, t := range vocab {
		ids[t] = i
	}
	type special struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Single  bool   `json:"single_word"`
		LStrip  bool   `json:"lstrip"`
		RStrip  bool   `json:"rstrip"`
		Norm    bool   `json:"normalized"`
		Special bool   `json:"special"`
	}
	var added []special
	for _, s := range []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"} {
		added = append(added, special{ID: ids[s], Content: s, Special: true})
	}
	tok := func(id string) map[string]any {
		return map[string]any{"SpecialToken": map[string]any{"id": id, "type_id": 0}}
	}
	seq := func(id string, typ int) map[string]any {
		return map[string]any{"Sequence": map[string]any{"id": id, "type_id": typ}}
	}
	doc := map[string]any{
		"version":      "1.0",
		"truncation":   nil,
		"padding":      nil,
		"added_tokens": added,
		"normalizer": map[string]any{"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
			"strip_accents": nil, "lowercase": true},
		"pre_tokenizer": map[string]any{"type": "BertPreTokenizer"},
		"post_processor": map[string]any{
			"type":   "TemplateProcessing",
			"single": []any{tok("[CLS]"), seq("A", 0), tok("[SEP]")},
			"pair":   []any{tok("[CLS]"), seq("A", 0), tok("[SEP]"), seq("B", 1), map[string]any{"SpecialToken": map[string]any{"id": "[SEP]", "type_id": 1}}},
			"special_tokens": map[string]any{
				"[CLS]": map[string]any{"id": "[CLS]", "ids": []int{ids["[CLS]"]}, "tokens": []string{"[CLS]"}},
				"[SEP]": map[string]any{"id": "[SEP]", "ids": []int{ids["[SEP]"]}, "tokens": []string{"[SEP]"}},
			},
		},
		"decoder": map[string]any{"type": "WordPiece", "prefix": "##", "cleanup": true},
		"model": map[string]any{"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
			"max_input_chars_per_word": 100, "vocab": ids},
	}
	b, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	return b, nil
}

// BertVocab is the generated tokenizer's vocabulary in id order.
func BertVocab() []string {
	v := []string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
	for c := 'a'; c <= 'z'; c++ {
		v = append(v, string(c))
	}
	for c := '0'; c <= '9'; c++ {
		v = append(v, string(c))
	}
	for _, p := range ".,!?'\"-:;()/&$%#@*+=" {
		v = append(v, string(p))
	}
	for c := 'a'; c <= 'z'; c++ {
		v = append(v, "##"+string(c))
	}
	for c := '0'; c <= '9'; c++ {
		v = append(v, "##"+string(c))
	}
	v = append(v,
		"the", "a", "an", "of", "and", "for", "with", "in", "on", "to",
		"quick", "brown", "fox", "jump", "over", "lazy", "dog", "cat",
		"red", "blue", "green", "black", "white", "shoe", "shirt", "jacket",
		"running", "run", "coffee", "cafe", "naive", "resume", "hotel", "phone",
		"case", "cable", "usb", "charger", "wireless", "head", "set", "book",
		"##s", "##ed", "##ing", "##er", "##est", "##ly", "##phone", "##set", "##less",
		"日", "本", "東", "京", "中", "文", "語", "の", "は",
	)
	return v
}

// WriteBertTokenizer writes BertTokenizerJSON to dir/tokenizer.json.
func WriteBertTokenizer(dir string) (string, error) {
	b, err := BertTokenizerJSON()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "tokenizer.json")
	return path, os.WriteFile(path, b, 0o644)
}
