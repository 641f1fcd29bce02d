package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// httpConn is a minimal HTTP/1.1 keep-alive client for one connection, one
// request at a time (no pipelining), in the spirit of wrk: the load
// generator shares the machine's cores with the server it measures, and
// net/http's client costs about as much CPU per request as the server's
// whole hit path, which would make the API look slower than it is against
// the raw go-redis baseline (a lean RESP client). Both sides of the
// comparison now use a lean client in a separate process over loopback TCP.
type httpConn struct {
	addr string
	auth string // Authorization header value, or ""
	c    net.Conn
	br   *bufio.Reader
	req  []byte
	body []byte
}

const ioTimeout = 10 * time.Second

func (h *httpConn) close() {
	if h.c != nil {
		_ = h.c.Close()
		h.c = nil
	}
}

// do sends one request and reads the whole response. The returned body is
// only valid until the next call. Any error closes the connection; the
// next call reconnects.
func (h *httpConn) do(method, path string, body []byte) (int, []byte, error) {
	status, b, err := h.roundTrip(method, path, body)
	if err != nil {
		h.close()
	}
	return status, b, err
}

func (h *httpConn) roundTrip(method, path string, body []byte) (int, []byte, error) {
	if h.c == nil {
		c, err := net.DialTimeout("tcp", h.addr, ioTimeout)
		if err != nil {
			return 0, nil, err
		}
		h.c = c
		if h.br == nil {
			h.br = bufio.NewReaderSize(c, 64<<10)
		} else {
			h.br.Reset(c)
		}
	}
	r := h.req[:0]
	r = append(r, method...)
	r = append(r, ' ')
	r = append(r, path...)
	r = append(r, " HTTP/1.1\r\nHost: "...)
	r = append(r, h.addr...)
	r = append(r, "\r\n"...)
	if h.auth != "" {
		r = append(r, "Authorization: "...)
		r = append(r, h.auth...)
		r = append(r, "\r\n"...)
	}
	if body != nil {
		r = append(r, "Content-Type: application/json\r\nContent-Length: "...)
		r = strconv.AppendInt(r, int64(len(body)), 10)
		r = append(r, "\r\n"...)
	}
	r = append(r, "\r\n"...)
	r = append(r, body...)
	h.req = r
	_ = h.c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := h.c.Write(r); err != nil {
		return 0, nil, err
	}
	return h.readResponse()
}

func (h *httpConn) readResponse() (int, []byte, error) {
	line, err := h.line()
	if err != nil {
		return 0, nil, fmt.Errorf("status line: %w", err)
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	length, chunked, closing := -1, false, false
	for {
		line, err := h.line()
		if err != nil {
			return 0, nil, fmt.Errorf("header: %w", err)
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, nil, fmt.Errorf("bad header %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, nil, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		}
	}
	h.body = h.body[:0]
	switch {
	case chunked:
		err = h.readChunked()
	case length >= 0:
		h.body = grow(h.body, length)
		_, err = io.ReadFull(h.br, h.body)
	default:
		return 0, nil, errors.New("response without Content-Length or chunked encoding")
	}
	if err != nil {
		return 0, nil, fmt.Errorf("body: %w", err)
	}
	if closing {
		h.close()
	}
	return status, h.body, nil
}

func (h *httpConn) readChunked() error {
	for {
		line, err := h.line()
		if err != nil {
			return err
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || n < 0 || n > 1<<30 {
			return fmt.Errorf("bad chunk size %q", line)
		}
		if n == 0 {
			for { // trailers up to the blank line
				if line, err = h.line(); err != nil || len(line) == 0 {
					return err
				}
			}
		}
		old := len(h.body)
		h.body = grow(h.body, old+int(n))
		if _, err := io.ReadFull(h.br, h.body[old:]); err != nil {
			return err
		}
		if line, err = h.line(); err != nil || len(line) != 0 {
			return fmt.Errorf("chunk not followed by CRLF: %v", err)
		}
	}
}

// line reads one CRLF-terminated line without its terminator; the bytes are
// valid until the next read.
func (h *httpConn) line() ([]byte, error) {
	l, err := h.br.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	l = bytes.TrimSuffix(l[:len(l)-1], []byte("\r"))
	return l, nil
}

// grow returns b resized to n bytes, reusing its storage when it can.
func grow(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	nb := make([]byte, n, max(n, 2*cap(b)))
	copy(nb, b)
	return nb
}
