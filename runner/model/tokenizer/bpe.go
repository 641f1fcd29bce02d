package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Byte-level BPE (GPT-2, RoBERTa, and the many models trained with their
// tokenizer): the ByteLevel pre-tokenizer splits text with GPT-2's pattern
// ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+),
// maps each piece's bytes to visible runes ("Ġ" is the space), and the BPE
// model merges adjacent symbols by rank.

type bpeModel struct {
	ranks          map[string]int // "a b" → merge rank
	byteSym        [256]string
	addPrefixSpace bool
	hasUnk         bool
}

func (t *Tokenizer) parseBPE(f *file, raw json.RawMessage) error {
	if isNull(raw) {
		return fmt.Errorf("BPE without merges")
	}
	var merges []json.RawMessage
	if err := json.Unmarshal(raw, &merges); err != nil {
		return fmt.Errorf("merges: %w", err)
	}
	m := &bpeModel{ranks: make(map[string]int, len(merges))}
	for i, mr := range merges {
		var s string
		var pair []string
		switch {
		case json.Unmarshal(mr, &s) == nil:
		case json.Unmarshal(mr, &pair) == nil && len(pair) == 2:
			s = pair[0] + " " + pair[1]
		default:
			return fmt.Errorf("merge %d: want \"a b\" or [a, b]", i)
		}
		if _, dup := m.ranks[s]; !dup {
			m.ranks[s] = i
		}
	}
	n := 0
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m.byteSym[b] = string(rune(b))
		} else {
			m.byteSym[b] = string(rune(256 + n))
			n++
		}
	}
	if f.Model.UnkToken != "" {
		id, ok := t.vocab[f.Model.UnkToken]
		if !ok {
			return fmt.Errorf("unk_token %q is not in the vocabulary", f.Model.UnkToken)
		}
		t.unk, m.hasUnk = id, true
	}
	t.bpe = m
	return nil
}

// checkByteLevel reads the ByteLevel pre-tokenizer's options.
func (m *bpeModel) checkByteLevel(raw json.RawMessage) error {
	if isNull(raw) {
		return fmt.Errorf("missing (precog reads BPE with the ByteLevel pre-tokenizer)")
	}
	var p struct {
		Type           string `json:"type"`
		AddPrefixSpace bool   `json:"add_prefix_space"`
		UseRegex       *bool  `json:"use_regex"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	if p.Type != "ByteLevel" {
		return fmt.Errorf("type %q is not supported with BPE (ByteLevel)", p.Type)
	}
	if p.UseRegex != nil && !*p.UseRegex {
		return fmt.Errorf("ByteLevel with use_regex false is not supported")
	}
	m.addPrefixSpace = p.AddPrefixSpace
	return nil
}

// encodeBPE appends the ids of text without added tokens.
func (t *Tokenizer) encodeBPE(dst []int32, s string, first bool, full func() bool) []int32 {
	if t.bpe.addPrefixSpace && first && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	var syms []string
	splitGPT2(s, func(piece string) bool {
		if full() {
			return false
		}
		syms = syms[:0]
		for i := 0; i < len(piece); i++ {
			syms = append(syms, t.bpe.byteSym[piece[i]])
		}
		syms = t.bpe.merge(syms)
		for _, sym := range syms {
			if id, ok := t.vocab[sym]; ok {
				dst = append(dst, id)
			} else if t.bpe.hasUnk {
				dst = append(dst, t.unk)
			}
		}
		return true
	})
	return dst
}

// merge applies the lowest-ranked merge of adjacent symbols, leftmost
// first, until none applies.
func (m *bpeModel) merge(syms []string) []string {
	var key strings.Builder
	for len(syms) > 1 {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			key.Reset()
			key.WriteString(syms[i])
			key.WriteByte(' ')
			key.WriteString(syms[i+1])
			if r, ok := m.ranks[key.String()]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		syms[at] += syms[at+1]
		syms = append(syms[:at+1], syms[at+2:]...)
	}
	return syms
}

// splitGPT2 cuts s as GPT-2's pre-tokenization pattern does and calls emit
// with each piece until it returns false.
func splitGPT2(s string, emit func(string) bool) {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		// 's 't 're 've 'm 'll 'd
		if r == '\'' {
			matched := false
			for _, c := range [...]string{"s", "t", "re", "ve", "m", "ll", "d"} {
				if strings.HasPrefix(s[i+1:], c) {
					if !emit(s[i : i+1+len(c)]) {
						return
					}
					i += 1 + len(c)
					matched = true
					break
				}
			}
			if matched {
				continue
			}
		}
		// ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
		j, rj, sj := i, r, size
		if r == ' ' && i+size < len(s) {
			if r2, s2 := utf8.DecodeRuneInString(s[i+size:]); !unicode.IsSpace(r2) {
				j, rj, sj = i+size, r2, s2
			}
		}
		if !unicode.IsSpace(rj) {
			class := runeClass(rj)
			k := j + sj
			for k < len(s) {
				r3, s3 := utf8.DecodeRuneInString(s[k:])
				if unicode.IsSpace(r3) || runeClass(r3) != class {
					break
				}
				k += s3
			}
			if !emit(s[i:k]) {
				return
			}
			i = k
			continue
		}
		// '\s+(?!\S)' then '\s+': a whitespace run followed by text leaves
		// its last character to the next piece (when the run has two or more).
		k, last := i, i
		for k < len(s) {
			r3, s3 := utf8.DecodeRuneInString(s[k:])
			if !unicode.IsSpace(r3) {
				break
			}
			last = k
			k += s3
		}
		if k < len(s) && last > i {
			k = last
		}
		if !emit(s[i:k]) {
			return
		}
		i = k
	}
}

// runeClass: 1 letters, 2 numbers, 3 anything else (not whitespace).
func runeClass(r rune) int {
	switch {
	case unicode.IsLetter(r):
		return 1
	case unicode.IsNumber(r):
		return 2
	}
	return 3
}
