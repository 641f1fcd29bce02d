package jobs

import (
	"regexp"
	"strings"
)

// Redacted replaces a credential in a view.
const Redacted = "[REDACTED]"

// RedactSecrets removes credentials from text that shows a spec or
// something derived from one (the dashboard's spec view, a run's errors in
// `status`, a spec error in a log line): the password of every URL
// (postgres://user:PW@host, redis://:PW@host, rediss://…), and the value of
// every password key, whether a key=value DSN (password=PW, also quoted),
// a query parameter (?password=PW), YAML (password: PW) or JSON
// ("password": "PW"). It cannot tell how a secret got there, so a password
// written literally in a spec is removed as surely as one expanded from
// ${…}; a bare ${VAR} reference is kept, since it names the secret without
// holding it.
func RedactSecrets(text string) string {
	if text == "" {
		return text
	}
	text = redactURLPasswords(text)
	return passwordKeyRE.ReplaceAllStringFunc(text, func(m string) string {
		sub := passwordKeyRE.FindStringSubmatch(m)
		key, val := sub[1], sub[2]
		q := ""
		if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') && val[len(val)-1] == val[0] {
			q, val = val[:1], val[1:len(val)-1]
		}
		if val == "" || val == Redacted || envRefRE.MatchString(val) {
			return m
		}
		return key + q + Redacted + q
	})
}

var (
	// passwordKeyRE is a password key (password, passwd, pwd, with an
	// optional quote before the separator, as in JSON) and its value:
	// quoted, or up to a space, comma, brace, ampersand or semicolon.
	passwordKeyRE = regexp.MustCompile(`(?i)(\b(?:password|passwd|pwd)["']?\s*[=:]\s*)("[^"\n]*"|'[^'\n]*'|\$\{[^}\n]*\}|[^\s,}&;"']+)`)
	// envRefRE is a value that is only a ${VAR} reference.
	envRefRE = regexp.MustCompile(`^\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}$`)
)

// redactURLPasswords replaces the password of every scheme://user:PW@host
// in text. A URL ends at a space, a quote, a comma or a brace (the
// delimiters of YAML, JSON and log lines); its userinfo ends at the last
// "@" before that.
func redactURLPasswords(text string) string {
	var b strings.Builder
	for {
		i := strings.Index(text, "://")
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		b.WriteString(text[:i+3])
		rest := text[i+3:]
		end := strings.IndexAny(rest, " \t\r\n\"'`,{}<>")
		if end < 0 {
			end = len(rest)
		}
		seg := rest[:end]
		at := strings.LastIndexByte(seg, '@')
		colon := strings.IndexByte(seg, ':')
		if at > 0 && colon >= 0 && colon < at && !strings.ContainsAny(seg[:at], "/?#") {
			pw := seg[colon+1 : at]
			if pw != "" && pw != Redacted && !envRefRE.MatchString(pw) {
				seg = seg[:colon+1] + Redacted + seg[at:]
			}
		}
		b.WriteString(seg)
		text = rest[end:]
	}
}
