package lookup

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Every answer of the API is JSON, 404 and 405 from the router included,
// and no path is cleaned into a redirect: a key of ".." is a key.
func TestRouterAnswersJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	p := "/v1/predictions/" + e.ns
	cases := []struct {
		name, method, path, body string
		code                     int
		msg                      string
	}{
		{"dot-dot key", "GET", p + "/..", "", 404, `no prediction for key ".."`},
		{"dot key", "GET", p + "/.", "", 404, `no prediction for key "."`},
		{"dot-dot inside", "GET", p + "/a/../b", "", 404, `no prediction for key "a/../b"`},
		{"escaped slash", "GET", p + "/a%2Fb", "", 404, `no prediction for key "a/b"`},
		{"empty key", "GET", p + "/", "", 400, "key is empty"},
		{"unknown path", "GET", "/nope", "", 404, "no such endpoint"},
		{"no namespace", "GET", "/v1/predictions/", "", 405, "allowed: POST"},
		{"delete key", "DELETE", p + "/k", "", 405, "allowed: GET, HEAD"},
		{"get an op", "GET", p + ":batchGet", "", 405, "allowed: POST"},
		{"post metrics", "POST", "/metrics", "", 405, "allowed: GET, HEAD"},
		{"duplicate keys", "POST", p + ":batchGet", `{"keys":["a"],"keys":["b"]}`, 400, `duplicate field "keys"`},
		{"escaped duplicate", "POST", p + ":batchGet", `{"keys":["a"],"k\u0065ys":["b"]}`, 400, `duplicate field "keys"`},
		{"duplicate input", "POST", p + ":predict", `{"key":"k","inputs":{"features":[1],"features":[2]}}`, 400, `field "inputs": duplicate field "features"`},
		{"duplicate key field", "POST", p + ":predict", `{"key":"k","key":"j"}`, 400, `duplicate field "key"`},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, e.http.URL+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultTransport.RoundTrip(req) // no redirect following
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body struct{ Error string }
		jsonErr := json.Unmarshal(b, &body)
		if resp.StatusCode != c.code || jsonErr != nil || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(body.Error, c.msg) {
			t.Errorf("%s: %s %s: %d %s %q; want %d JSON with %q", c.name, c.method, c.path, resp.StatusCode, resp.Header.Get("Content-Type"), b, c.code, c.msg)
		}
	}
}

// The bearer scheme is case-insensitive (RFC 7235).
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	for _, h := range []string{"bearer " + token, "BEARER " + token, "Bearer  " + token} {
		req, _ := http.NewRequest("GET", e.http.URL+"/v1/predictions/"+e.ns+"/nobody", nil)
		req.Header.Set("authorization", h)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("Authorization %q: %d, want 404 (authorised miss)", strings.Replace(h, token, "…", 1), resp.StatusCode)
		}
	}
	for _, h := range []string{"Basic " + token, "Bearer", "Bearer ", "Bearer" + token} {
		req, _ := http.NewRequest("GET", e.http.URL+"/v1/predictions/"+e.ns+"/nobody", nil)
		req.Header.Set("Authorization", h)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", strings.Replace(h, token, "…", 1), resp.StatusCode)
		}
	}
}

// A body sent too slowly is a 408 with a plain message, not a 500 that
// names the sockets.
func TestSlowBodyIs408(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	hs := httptest.NewUnstartedServer(e.srv)
	hs.Config.ReadTimeout = 300 * time.Millisecond
	hs.Start()
	defer hs.Close()
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/predictions/%s:batchGet HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 40\r\n\r\n{\"keys\":", e.ns, token)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var body struct{ Error string }
	if resp.StatusCode != http.StatusRequestTimeout || json.Unmarshal(b, &body) != nil || body.Error != "request body not received in time" {
		t.Fatalf("slow body: %d %s; want 408 with a plain message", resp.StatusCode, b)
	}
	if strings.Contains(string(b), "127.0.0.1") {
		t.Fatalf("answer names a socket address: %s", b)
	}
}
