// Package tokenizer reads a HuggingFace tokenizer.json and encodes text to
// token ids in pure Go, for text embedding models.
//
// It implements what the common files use. WordPiece (the BERT family:
// sentence-transformers' MiniLM, MPNet, BGE, E5…): the BertNormalizer
// (clean text, CJK spacing, accent stripping, lowercasing), the
// BertPreTokenizer (split on whitespace and punctuation) and the WordPiece
// model with its "##" continuations and unknown token. Byte-level BPE
// (GPT-2, RoBERTa): the ByteLevel pre-tokenizer (GPT-2's split pattern,
// bytes as visible runes) and BPE merges by rank (bpe.go). Both: special
// added tokens matched in the raw text, the post-processor's tokens around
// the text (TemplateProcessing, BertProcessing, RobertaProcessing) and
// truncation to a maximum length. Other kinds (Unigram, Metaspace BPE) and
// normalizers are refused when the file is loaded, naming what is not
// supported.
//
// Why not a library: github.com/gomlx/go-huggingface (v0.3.1) reads only
// SentencePiece models, and github.com/sugarme/tokenizer (v0.3.0) loads
// tokenizer.json but disagrees with the reference (@huggingface/tokenizers)
// on accented text (it does not strip accents when strip_accents is null
// and lowercase is true, as BERT uncased files say) and on no-break spaces.
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer encodes text to ids. It is safe for concurrent use.
type Tokenizer struct {
	kind     string // WordPiece | BPE
	bpe      *bpeModel
	vocab    map[string]int32
	size     int
	unk      int32
	prefix   string // continuing-subword prefix, "##"
	maxChars int    // a longer word is the unknown token

	clean, chinese, stripAccents, lowercase bool

	// added are the special tokens matched in the raw text, longest first.
	added []addedToken
	// head and tail surround a single sequence: [CLS] and [SEP].
	head, tail []int32
	pad        int32
}

type addedToken struct {
	content string
	id      int32
}

// file is the part of tokenizer.json precog reads.
type file struct {
	AddedTokens []struct {
		ID      int32  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type          string           `json:"type"`
		UnkToken      string           `json:"unk_token"`
		Prefix        *string          `json:"continuing_subword_prefix"`
		MaxInputChars int              `json:"max_input_chars_per_word"`
		Vocab         map[string]int32 `json:"vocab"`
		Merges        json.RawMessage  `json:"merges"`
	} `json:"model"`
}

// Load reads a tokenizer.json.
func Load(path string) (*Tokenizer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Parse reads the contents of a tokenizer.json.
func Parse(b []byte) (*Tokenizer, error) {
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %w", err)
	}
	if f.Model.Type != "WordPiece" && f.Model.Type != "BPE" {
		return nil, fmt.Errorf("model type %q is not supported (precog reads WordPiece and byte-level BPE tokenizers)", f.Model.Type)
	}
	t := &Tokenizer{kind: f.Model.Type, vocab: f.Model.Vocab, prefix: "##", maxChars: f.Model.MaxInputChars}
	if f.Model.Prefix != nil {
		t.prefix = *f.Model.Prefix
	}
	if t.maxChars <= 0 {
		t.maxChars = 100
	}
	for _, id := range t.vocab {
		t.size = max(t.size, int(id)+1)
	}
	if t.kind == "BPE" {
		if err := t.parseBPE(&f, f.Model.Merges); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
	} else {
		unk, ok := t.vocab[f.Model.UnkToken]
		if !ok {
			return nil, fmt.Errorf("unk_token %q is not in the vocabulary", f.Model.UnkToken)
		}
		t.unk = unk
	}
	for _, a := range f.AddedTokens {
		t.added = append(t.added, addedToken{a.Content, a.ID})
		t.size = max(t.size, int(a.ID)+1)
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].content) > len(t.added[j].content) })
	for _, p := range []string{"[PAD]", "<pad>"} {
		if id, ok := t.vocab[p]; ok {
			t.pad = id
			break
		}
	}
	if err := t.parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if t.kind == "BPE" {
		if err := t.bpe.checkByteLevel(f.PreTokenizer); err != nil {
			return nil, fmt.Errorf("pre_tokenizer: %w", err)
		}
	} else if err := checkPreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if err := t.parsePostProcessor(f.PostProcessor); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	return t, nil
}

func (t *Tokenizer) parseNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var n struct {
		Type         string `json:"type"`
		CleanText    *bool  `json:"clean_text"`
		Chinese      *bool  `json:"handle_chinese_chars"`
		StripAccents *bool  `json:"strip_accents"`
		Lowercase    *bool  `json:"lowercase"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return err
	}
	if n.Type != "BertNormalizer" {
		return fmt.Errorf("type %q is not supported (BertNormalizer)", n.Type)
	}
	def := func(p *bool, d bool) bool {
		if p == nil {
			return d
		}
		return *p
	}
	t.clean = def(n.CleanText, true)
	t.chinese = def(n.Chinese, true)
	t.lowercase = def(n.Lowercase, true)
	// strip_accents null follows lowercase, as in BERT uncased.
	t.stripAccents = def(n.StripAccents, t.lowercase)
	return nil
}

func checkPreTokenizer(raw json.RawMessage) error {
	if isNull(raw) {
		return errors.New("missing (precog reads the BertPreTokenizer)")
	}
	var p struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	if p.Type != "BertPreTokenizer" {
		return fmt.Errorf("type %q is not supported (BertPreTokenizer)", p.Type)
	}
	return nil
}

func (t *Tokenizer) parsePostProcessor(raw json.RawMessage) error {
	if isNull(raw) {
		return nil // no special tokens around the text
	}
	var p struct {
		Type   string            `json:"type"`
		Sep    []json.RawMessage `json:"sep"`
		Cls    []json.RawMessage `json:"cls"`
		Single []struct {
			Special *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		Specials map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	switch p.Type {
	case "ByteLevel":
		// GPT-2: no special tokens around the text.
	case "BertProcessing", "RobertaProcessing":
		var cls, sep int32
		if len(p.Cls) != 2 || len(p.Sep) != 2 || json.Unmarshal(p.Cls[1], &cls) != nil || json.Unmarshal(p.Sep[1], &sep) != nil {
			return fmt.Errorf("%s: cls and sep must be [token, id]", p.Type)
		}
		t.head, t.tail = []int32{cls}, []int32{sep}
	case "TemplateProcessing":
		seen := false
		for _, piece := range p.Single {
			switch {
			case piece.Sequence != nil:
				seen = true
			case piece.Special != nil:
				sp, ok := p.Specials[piece.Special.ID]
				if !ok {
					return fmt.Errorf("special token %q has no ids", piece.Special.ID)
				}
				if seen {
					t.tail = append(t.tail, sp.IDs...)
				} else {
					t.head = append(t.head, sp.IDs...)
				}
			}
		}
	default:
		return fmt.Errorf("type %q is not supported (TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel)", p.Type)
	}
	return nil
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// Kind names the tokenizer model, for `precog validate`.
func (t *Tokenizer) Kind() string {
	if t.kind == "BPE" {
		return "BPE (byte-level)"
	}
	return t.kind
}

// VocabSize is the number of ids, added tokens included.
func (t *Tokenizer) VocabSize() int { return t.size }

// PadID is the id of [PAD] (0 when the vocabulary has none).
func (t *Tokenizer) PadID() int32 { return t.pad }

// Encode appends the ids of text to dst, special tokens included, keeping
// at most maxLen ids (0: no limit); truncation drops the text's last tokens
// and keeps the closing special tokens. A long text stops being tokenized
// once the limit is reached.
func (t *Tokenizer) Encode(dst []int32, text string, maxLen int) []int32 {
	dst = append(dst, t.head...)
	limit := -1 // text ids allowed
	if maxLen > 0 {
		limit = max(maxLen-len(t.head)-len(t.tail), 0)
	}
	first := len(dst)
	full := func() bool { return limit >= 0 && len(dst)-first >= limit }
	for piece := 0; len(text) > 0 && !full(); piece++ {
		// Split at the first added token: the text before it is
		// normalized and split into words, the token is one id.
		at, tok := t.findAdded(text)
		if t.bpe != nil {
			dst = t.encodeBPE(dst, text[:at], piece == 0, full)
		} else {
			dst = t.encodeText(dst, text[:at], full)
		}
		if tok == nil {
			break
		}
		dst = append(dst, tok.id)
		text = text[at+len(tok.content):]
	}
	if limit >= 0 && len(dst)-first > limit {
		dst = dst[:first+limit]
	}
	return append(dst, t.tail...)
}

// findAdded returns the byte offset of the first added token in s (len(s)
// when none) and the token.
func (t *Tokenizer) findAdded(s string) (int, *addedToken) {
	best, bestTok := len(s), (*addedToken)(nil)
	for i := range t.added {
		a := &t.added[i]
		if j := strings.Index(s[:min(len(s), best+len(a.content))], a.content); j >= 0 && j < best {
			best, bestTok = j, a
		}
	}
	return best, bestTok
}

// encodeText normalizes s, splits it into words (BertPreTokenizer:
// whitespace separates, each punctuation character is a word) and appends
// their WordPiece ids until full.
func (t *Tokenizer) encodeText(dst []int32, s string, full func() bool) []int32 {
	s = t.normalize(s)
	word := 0
	emit := func(lo, hi int) {
		if lo < hi && !full() {
			dst = t.wordPiece(dst, s[lo:hi])
		}
	}
	for i, r := range s {
		switch {
		case r == ' ':
			emit(word, i)
			word = i + 1
		case isPunct(r):
			emit(word, i)
			n := i + utf8.RuneLen(r)
			emit(i, n)
			word = n
		}
	}
	emit(word, len(s))
	return dst
}

// normalize applies the BertNormalizer; whitespace comes out as ' '.
func (t *Tokenizer) normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r < utf8.RuneSelf && r > ' ' && r != 0x7f {
			b.WriteByte(byte(r)) // printable ASCII: kept as is
			continue
		}
		if t.clean {
			if r == 0 || r == 0xfffd || isControl(r) {
				continue
			}
		}
		switch {
		case isWhitespace(r):
			b.WriteByte(' ')
		case t.chinese && isChinese(r):
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	out := b.String()
	if t.stripAccents {
		out = stripAccents(out)
	}
	if t.lowercase {
		out = strings.ToLower(out)
	}
	return out
}

// stripAccents decomposes (NFD) and drops nonspacing marks.
func stripAccents(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	d := norm.NFD.String(s)
	var b strings.Builder
	b.Grow(len(d))
	for _, r := range d {
		if !unicode.Is(unicode.Mn, r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// wordPiece appends the ids of one word: greedy longest match first, pieces
// after the first carrying the prefix; a word with a part no piece covers,
// or longer than maxChars, is the unknown token.
func (t *Tokenizer) wordPiece(dst []int32, w string) []int32 {
	if utf8.RuneCountInString(w) > t.maxChars {
		return append(dst, t.unk)
	}
	if id, ok := t.vocab[w]; ok { // the common case: a whole word
		return append(dst, id)
	}
	mark := len(dst)
	var buf [64]byte
	for start := 0; start < len(w); {
		end := len(w)
		found := int32(-1)
		for end > start {
			key := buf[:0]
			if start > 0 {
				key = append(key, t.prefix...)
			}
			key = append(key, w[start:end]...)
			if id, ok := t.vocab[string(key)]; ok {
				found = id
				break
			}
			_, size := utf8.DecodeLastRuneInString(w[start:end])
			end -= size
		}
		if found < 0 {
			return append(dst[:mark], t.unk)
		}
		dst = append(dst, found)
		start = end
	}
	return dst
}

func isWhitespace(r rune) bool {
	return r == '\t' || r == '\n' || r == '\r' || unicode.IsSpace(r)
}

// isControl is Rust's char::is_other (Cc, Cf, Cs, Co, Cn) except tab, LF and CR.
func isControl(r rune) bool {
	if r < utf8.RuneSelf {
		return (r < 0x20 || r == 0x7f) && r != '\t' && r != '\n' && r != '\r'
	}
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) {
		return true
	}
	return !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C)
}

// isPunct is BERT's punctuation: ASCII symbols and Unicode P* categories.
func isPunct(r rune) bool {
	if r < utf8.RuneSelf {
		return (r >= 33 && r <= 47) || (r >= 58 && r <= 64) || (r >= 91 && r <= 96) || (r >= 123 && r <= 126)
	}
	return unicode.IsPunct(r)
}

// isChinese is the CJK Unified Ideographs blocks BERT pads with spaces.
func isChinese(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) || (r >= 0x3400 && r <= 0x4DBF) || (r >= 0x20000 && r <= 0x2A6DF) ||
		(r >= 0x2A700 && r <= 0x2B73F) || (r >= 0x2B740 && r <= 0x2B81F) || (r >= 0x2B920 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) || (r >= 0x2F800 && r <= 0x2FA1F)
}
