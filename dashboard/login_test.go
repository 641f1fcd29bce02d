package dashboard

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/precog-ml/precog/jobs/ledger/bolt"
)

// TestLoginNextStaysOnSite posts a valid login with each next and checks
// where the answer sends the browser: a same-origin path as given, anything
// a browser could read as another host (a tab it drops, a second slash or a
// backslash, a scheme, the same percent-encoded) to "/".
func TestLoginNextStaysOnSite(t *testing.T) {
	l, err := bolt.OpenIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ts := newServer(t, Options{Source: Shared{L: l}})
	nc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct{ next, want string }{
		{"/%09/evil.example", "/"},
		{"/\t/evil.example", "/"},
		{"/%0a/evil.example", "/"},
		{"/%2509/evil.example", "/"},
		{"//evil", "/"},
		{"/\\evil", "/"},
		{"/%5Cevil", "/"},
		{"/%2F/evil", "/"},
		{"https://evil", "/"},
		{"evil", "/"},
		{"", "/"},
		{"/ok/path?x=1", "/ok/path?x=1"},
		{"/runs/r-1", "/runs/r-1"},
		{"/", "/"},
	} {
		resp, err := nc.PostForm(ts.URL+"/login", url.Values{"token": {token}, "next": {c.next}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || got != c.want {
			t.Errorf("login next=%q → %d Location %q, want %q", c.next, resp.StatusCode, got, c.want)
		}
		if got := safeNext(c.next); got != c.want {
			t.Errorf("safeNext(%q) = %q, want %q", c.next, got, c.want)
		}
	}
}
