package postgres

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// checkQuery rejects what cannot be wrapped as a subquery: an empty query,
// a trailing semicolon, several statements, and unterminated strings,
// quoted identifiers or comments (which would swallow the wrapper's closing
// parenthesis and give a misleading Postgres error). It follows Postgres's
// lexical rules for '…' and E'…' strings, "…" identifiers, $tag$…$tag$
// dollar quotes, -- line comments and nested /* */ comments, so a semicolon
// inside any of them is fine.
func checkQuery(q string) error {
	code := false // anything but whitespace and comments seen
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			j := strings.IndexByte(q[i:], '\n')
			if j < 0 {
				i = len(q)
			} else {
				i += j + 1
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			end, err := skipBlockComment(q, i)
			if err != nil {
				return err
			}
			i = end
		case c == '\'':
			escapes := i > 0 && (q[i-1] == 'E' || q[i-1] == 'e') && (i == 1 || !identChar(q[i-2]))
			end, err := skipQuoted(q, i, '\'', escapes)
			if err != nil {
				return err
			}
			i, code = end, true
		case c == '"':
			end, err := skipQuoted(q, i, '"', false)
			if err != nil {
				return err
			}
			i, code = end, true
		case c == '$' && (i == 0 || !identChar(q[i-1])):
			end, err := skipDollar(q, i)
			if err != nil {
				return err
			}
			i, code = end, true
		case c == ';':
			if onlyTrivia(q[i+1:]) {
				return fmt.Errorf("ends with %q at %s: give a single SELECT without the trailing semicolon", ";", lineCol(q, i))
			}
			return fmt.Errorf("holds several statements (semicolon at %s): give a single SELECT", lineCol(q, i))
		default:
			i, code = i+1, true
		}
	}
	if !code {
		return errors.New("is empty: give a SELECT")
	}
	return nil
}

// identChar reports whether c can continue an identifier (so that E' or $
// right after it is not the start of an escape string or a dollar quote).
func identChar(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// skipQuoted returns the index just past the quoted token starting at
// q[start] == quote. A doubled quote stands for itself; with escapes (E'…'
// strings) a backslash escapes the next byte.
func skipQuoted(q string, start int, quote byte, escapes bool) (int, error) {
	for i := start + 1; i < len(q); i++ {
		switch q[i] {
		case '\\':
			if escapes {
				i++
			}
		case quote:
			if i+1 < len(q) && q[i+1] == quote {
				i++
				continue
			}
			return i + 1, nil
		}
	}
	what := "string"
	if quote == '"' {
		what = "quoted identifier"
	}
	return 0, fmt.Errorf("has an unterminated %s starting at %s", what, lineCol(q, start))
}

// skipBlockComment returns the index just past the (nested) /* */ comment
// starting at q[start].
func skipBlockComment(q string, start int) (int, error) {
	depth := 0
	for i := start; i+1 < len(q); {
		switch {
		case q[i] == '/' && q[i+1] == '*':
			depth++
			i += 2
		case q[i] == '*' && q[i+1] == '/':
			depth--
			i += 2
			if depth == 0 {
				return i, nil
			}
		default:
			i++
		}
	}
	return 0, fmt.Errorf("has an unterminated /* comment starting at %s", lineCol(q, start))
}

// skipDollar returns the index just past a $tag$…$tag$ string starting at
// q[start] == '$', or start+1 when the $ does not open one (a parameter
// such as $1 or a lone $).
func skipDollar(q string, start int) (int, error) {
	j := start + 1
	for j < len(q) && q[j] != '$' {
		c := q[j]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80 || j > start+1 && c >= '0' && c <= '9') {
			return start + 1, nil
		}
		j++
	}
	if j >= len(q) {
		return start + 1, nil
	}
	tag := q[start : j+1]
	end := strings.Index(q[j+1:], tag)
	if end < 0 {
		return 0, fmt.Errorf("has an unterminated %s string starting at %s", tag, lineCol(q, start))
	}
	return j + 1 + end + len(tag), nil
}

// onlyTrivia reports whether s holds nothing but whitespace and comments.
func onlyTrivia(s string) bool {
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return true
			}
			i += j + 1
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			end, err := skipBlockComment(s, i)
			if err != nil {
				return false
			}
			i = end
		default:
			return false
		}
	}
	return true
}

// lineCol names byte offset off of q as "line L column C" (1-based, columns
// in characters).
func lineCol(q string, off int) string {
	line, col := 1, 1
	for _, r := range q[:off] {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Sprintf("line %d column %d", line, col)
}

// charOffset converts a 1-based character position in s (as Postgres
// reports error positions) to a byte offset, or -1 when out of range.
func charOffset(s string, pos int) int {
	if pos < 1 {
		return -1
	}
	n := 1
	for i := 0; i < len(s); {
		if n == pos {
			return i
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n++
	}
	return -1
}
