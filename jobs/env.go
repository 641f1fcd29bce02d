package jobs

import (
	"regexp"
	"strconv"
	"strings"
)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expand replaces ${VAR} and ${VAR:-default} in a value with the environment
// (the default applies when VAR is unset or empty); $$ is a literal $, and a
// $ followed by anything else stays as it is (so "$1" in a SQL query is
// kept). An unset variable without default is an error naming the variable
// and the field.
func (d *decoder) expand(s, path string, line int) (string, bool) {
	if !strings.Contains(s, "$") {
		return s, true
	}
	if d.view && storePath(path) {
		if connField(path) {
			return s, true // never expanded: a view needs no secret
		}
		if out, msg := expandEnv(s, d.env); msg == "" {
			return out, true
		}
		return "", false // unset: the field stays zero
	}
	out, msg := expandEnv(s, d.env)
	if msg != "" {
		d.failAt(path, line, "%s", msg)
		return "", false
	}
	return out, true
}

// expandEnv is expand without the error bookkeeping: it returns the expanded
// string, or a message describing the first problem.
func expandEnv(s string, lookup func(string) (string, bool)) (string, string) {
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' || i+1 >= len(s) {
			b.WriteByte(c)
			i++
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i += 2
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", "unterminated ${ in " + quoteShort(s[i:]) + " (write $$ for a literal $)"
			}
			expr := s[i+2 : i+2+end]
			name, def, hasDef := strings.Cut(expr, ":-")
			if !envNameRE.MatchString(name) {
				return "", "invalid environment variable name " + quoteShort(name) + " (names are letters, digits and _; write $$ for a literal $)"
			}
			val, ok := lookup(name)
			switch {
			case hasDef && val == "":
				val = def
			case !ok:
				return "", "environment variable " + name + " is not set (set it, or give a default: ${" + name + ":-value})"
			}
			b.WriteString(val)
			i += 2 + end + 1
		default:
			b.WriteByte('$')
			i++
		}
	}
	return b.String(), ""
}

// quoteShort quotes s for an error message, cut to a readable length.
func quoteShort(s string) string {
	const max = 40
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strconv.Quote(s)
}

// storePath reports a field of a store the job connects to (its sinks, a
// Postgres source, the serving features table): a read-only view of the
// spec (LoadForView) needs none of them.
func storePath(path string) bool {
	for _, p := range []string{"sinks.", "source.postgres", "serving.features"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// connField reports a field that holds how to reach a store, and so may
// hold its credentials: a DSN, an address, a user or a password.
func connField(path string) bool {
	last := path[strings.LastIndexByte(path, '.')+1:]
	if i := strings.IndexByte(last, '['); i >= 0 {
		last = last[:i]
	}
	switch last {
	case "dsn", "addr", "addrs", "password", "username", "user", "url":
		return true
	}
	return false
}
