// Package jsontext writes JSON strings the one way precog spells them: the
// Redis sink's stored records and the lookup API's answers (live results,
// Postgres rows, keys) go through it, so that the same string reads the
// same byte for byte whichever store or path answered.
package jsontext

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string: quotes, backslashes and
// control characters escaped (\n, \r, \t by name, the rest as \u00XX),
// invalid UTF-8 replaced by \ufffd (as encoding/json does), everything
// else copied as is. Unlike encoding/json it does not escape <, >, & or
// U+2028/U+2029: the output is JSON, not HTML or JavaScript source, and
// copying them keeps the common case a plain copy.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
