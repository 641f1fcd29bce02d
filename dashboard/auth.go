package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Session cookie and lifetime.
const (
	cookieName = "precog_session"
	sessionTTL = 12 * time.Hour
	// csrfField is the form field (or X-CSRF-Token header) of actions.
	csrfField = "csrf"
)

// viewer is who a request is: what pages need to render forms.
type viewer struct {
	// CSRF is the token every action form posts back.
	CSRF string
	// Insecure: the dashboard serves without authentication (banner).
	Insecure bool
	// Session: logged in with a cookie (the page shows Log out).
	Session bool
	// bearer: authenticated by an Authorization header (no CSRF needed:
	// a browser never adds it by itself).
	bearer bool
}

type handler func(w http.ResponseWriter, r *http.Request, v viewer)

// auth checks tokens in constant time and keeps login sessions in memory
// (a restart logs everyone out).
type auth struct {
	tokens   [][32]byte
	insecure bool
	key      []byte // HMAC key of CSRF tokens
	mu       sync.Mutex
	sessions map[string]time.Time // id -> expiry
	now      func() time.Time
}

func newAuth(tokens []string, insecure bool) (*auth, error) {
	a := &auth{insecure: insecure && len(tokens) == 0, key: make([]byte, 32), sessions: map[string]time.Time{}, now: time.Now}
	if _, err := rand.Read(a.key); err != nil {
		return nil, err
	}
	for _, t := range tokens {
		a.tokens = append(a.tokens, sha256.Sum256([]byte(t)))
	}
	return a, nil
}

// validToken compares tok with every token in constant time (hashes make
// the lengths equal; no early exit).
func (a *auth) validToken(tok string) bool {
	if tok == "" {
		return false
	}
	got := sha256.Sum256([]byte(tok))
	match := 0
	for i := range a.tokens {
		match |= subtle.ConstantTimeCompare(got[:], a.tokens[i][:])
	}
	return match == 1
}

func (a *auth) csrfFor(id string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte("csrf:" + id))
	return hex.EncodeToString(m.Sum(nil))
}

// identify returns the request's viewer, or false when it is not
// authenticated.
func (a *auth) identify(r *http.Request) (viewer, bool) {
	if a.insecure {
		return viewer{CSRF: a.csrfFor("anonymous"), Insecure: true}, true
	}
	if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		if a.validToken(strings.TrimSpace(tok)) {
			return viewer{CSRF: a.csrfFor("bearer"), bearer: true}, true
		}
		return viewer{}, false
	}
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return viewer{}, false
	}
	a.mu.Lock()
	exp, ok := a.sessions[c.Value]
	if ok && a.now().After(exp) {
		delete(a.sessions, c.Value)
		ok = false
	}
	a.mu.Unlock()
	if !ok {
		return viewer{}, false
	}
	return viewer{CSRF: a.csrfFor(c.Value), Session: true}, true
}

// newSession records a login and returns its cookie.
func (a *auth) newSession(secure bool) (*http.Cookie, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	id := hex.EncodeToString(b)
	now := a.now()
	a.mu.Lock()
	for k, exp := range a.sessions { // drop expired ones as we go
		if now.After(exp) {
			delete(a.sessions, k)
		}
	}
	a.sessions[id] = now.Add(sessionTTL)
	a.mu.Unlock()
	return &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, Secure: secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL.Seconds())}, nil
}

func (a *auth) endSession(r *http.Request) {
	if c, err := r.Cookie(cookieName); err == nil {
		a.mu.Lock()
		delete(a.sessions, c.Value)
		a.mu.Unlock()
	}
}

// page guards an HTML page: without a valid token, a redirect to the login.
func (a *auth) page(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := a.identify(r)
		if !ok {
			if r.Header.Get("Authorization") != "" {
				unauthorized(w)
				return
			}
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		h(w, r, v)
	})
}

// api guards a JSON endpoint: 401 without a valid token.
func (a *auth) api(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := a.identify(r)
		if !ok {
			unauthorized(w)
			return
		}
		h(w, r, v)
	})
}

// action guards a POST: 401 without a valid token, 403 without the CSRF
// token of the viewer's session (bearer requests need none).
func (a *auth) action(h handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := a.identify(r)
		if !ok {
			unauthorized(w)
			return
		}
		if !v.bearer {
			got := r.Header.Get("X-CSRF-Token")
			if got == "" {
				got = r.PostFormValue(csrfField)
			}
			if subtle.ConstantTimeCompare([]byte(got), []byte(v.CSRF)) != 1 {
				http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
				return
			}
		}
		h(w, r, v)
	})
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="precog dashboard"`)
	http.Error(w, "unauthorized: log in at /login or send Authorization: Bearer <token>", http.StatusUnauthorized)
}

// safeNext keeps a post-login redirect on this site: a path with one
// leading "/" whose next character is neither "/" nor "\\" (which a browser
// would read as another host), with no backslash and no control character
// (a browser drops a tab or newline, so "/\t/evil.example" would become
// "//evil.example"), either as given or percent-decoded. Anything else is
// "/".
func safeNext(next string) string {
	for _, form := range nextForms(next) {
		if !sameOriginPath(form) {
			return "/"
		}
	}
	return next
}

// nextForms is next as given and each percent-decoding of it, up to a few
// rounds: a browser or proxy may decode once more than we did.
func nextForms(next string) []string {
	forms := []string{next}
	for range 3 {
		dec, err := url.PathUnescape(forms[len(forms)-1])
		if err != nil {
			return append(forms, "\\invalid") // undecodable: refused
		}
		if dec == forms[len(forms)-1] {
			break
		}
		forms = append(forms, dec)
	}
	return forms
}

func sameOriginPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, '\\') {
		return false
	}
	if len(p) > 1 && p[1] == '/' {
		return false
	}
	for _, r := range p {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if s.auth.insecure {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, http.StatusOK, "login", map[string]any{"Title": "Log in", "Next": safeNext(r.URL.Query().Get("next"))})
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	next := safeNext(r.PostFormValue("next"))
	if s.auth.insecure {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if !s.auth.validToken(r.PostFormValue("token")) {
		s.opts.Logger.Warn("dashboard: login refused (wrong token)", "remote", r.RemoteAddr)
		s.render(w, http.StatusUnauthorized, "login", map[string]any{"Title": "Log in", "Next": next, "Error": "That token is not valid."})
		return
	}
	c, err := s.auth.newSession(r.TLS != nil)
	if err != nil {
		http.Error(w, "could not start a session", http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, c)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	s.auth.endSession(r)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
