package httpx

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strings"
)

// readCommonHead reads the head of the answer every inference server
// sends — HTTP/1.1, a final status with a body (2xx to 5xx but 204 and
// 304), either exactly one Content-Length or exactly one
// "Transfer-Encoding: chunked" (as Go net/http servers send a body they
// did not measure), no Trailer or Pragma, no Connection but "keep-alive"
// (Node's and llama.cpp's servers send it), header lines of printable
// ASCII ending in CRLF — when it is already wholly in br's buffer, and
// returns the answer http.ReadResponse would return for it, at a fraction
// of the cost and stack depth: one string for the head, keys and values
// cut from it, one object for the answer, its body and its values. For
// anything else it returns nil and consumes nothing, and the caller reads
// the answer with http.ReadResponse (FuzzCommonHeadMatchesReadResponse).
func readCommonHead(br *bufio.Reader, req *http.Request) *http.Response {
	buf, _ := br.Peek(br.Buffered()) // no I/O: what is already read
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 || req.Method == http.MethodHead {
		return nil
	}
	raw := buf[:end+2] // each line with its CRLF
	for _, c := range raw {
		if (c < ' ' || c > '~') && c != '\t' && c != '\r' && c != '\n' {
			return nil
		}
	}
	nl := bytes.IndexByte(raw, '\n')
	status := raw[:nl+1]
	if !bytes.HasPrefix(status, []byte("HTTP/1.1 ")) || !statusLine(status) {
		return nil
	}
	code := int(status[9]-'0')*100 + int(status[10]-'0')*10 + int(status[11]-'0')
	if code < 200 || code > 599 || code == http.StatusNoContent || code == http.StatusNotModified {
		return nil
	}
	lines := bytes.Count(raw, []byte("\n")) - 1
	head := string(raw) // keys and values are cut from this one string
	a := &commonAnswer{}
	resp := &a.resp
	*resp = http.Response{
		Status: head[9 : nl-1], StatusCode: code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  make(http.Header, lines),
		Request: req,
	}
	values := a.values[:]
	if lines > len(values) {
		values = make([]string, lines)
	}
	length, chunked := int64(-1), false
	for i := nl + 1; i < len(head); {
		j := i + strings.IndexByte(head[i:], '\n')
		if j == i || head[j-1] != '\r' {
			return nil // a bare LF
		}
		line := head[i : j-1]
		i = j + 1
		colon := strings.IndexByte(line, ':')
		if colon < 0 || strings.IndexByte(line, '\r') >= 0 {
			return nil // no colon, or a bare CR
		}
		key, value := line[:colon], trimSpace(line[colon+1:])
		if !validToken(key) {
			return nil
		}
		if !canonical(key) {
			key = textproto.CanonicalMIMEHeaderKey(key)
		}
		switch key {
		case "Content-Length":
			if length >= 0 {
				return nil
			}
			if length = contentLength(value); length < 0 {
				return nil
			}
		case "Connection":
			if !strings.EqualFold(value, "keep-alive") {
				return nil // close, or a list of options: net/http reads those
			}
		case "Transfer-Encoding":
			if chunked || !strings.EqualFold(value, "chunked") {
				return nil // net/http refuses those
			}
			chunked = true
			continue // net/http drops it from the header
		case "Trailer", "Pragma":
			return nil
		}
		if vv := resp.Header[key]; vv != nil {
			resp.Header[key] = append(vv, value)
		} else {
			vv, values = values[:1:1], values[1:]
			vv[0] = value
			resp.Header[key] = vv
		}
	}
	if chunked && length >= 0 || !chunked && length < 0 {
		return nil // a length and chunks, or neither
	}
	br.Discard(end + 4)
	resp.ContentLength = length
	switch {
	case chunked:
		a.te[0] = "chunked"
		resp.TransferEncoding = a.te[:]
		a.chunks = chunkedBody{src: httputil.NewChunkedReader(br), br: br, resp: resp}
		resp.Body = &a.chunks
	case length == 0:
		resp.Body = http.NoBody
	default:
		a.body = lengthBody{br: br, left: length}
		resp.Body = &a.body
	}
	return resp
}

// commonAnswer is what readCommonHead builds, in one allocation instead
// of three: the response, its body (of either kind) and its header values
// (as many as uvicorn sends; more are allocated apart).
type commonAnswer struct {
	resp   http.Response
	body   lengthBody
	chunks chunkedBody
	te     [1]string
	values [4]string
}

// statusLine: "HTTP/1.1 ", three digits, then the end of the line or a
// space and a reason; the line ends in CRLF and holds no other CR or LF.
func statusLine(l []byte) bool {
	n := len(l)
	if n < 14 || l[n-2] != '\r' || bytes.IndexByte(l[:n-2], '\r') >= 0 {
		return false
	}
	for _, c := range l[9:12] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return n == 14 || l[12] == ' '
}

// canonical reports whether key is in net/http's canonical form: a capital
// letter first and after each hyphen, small letters elsewhere.
func canonical(key string) bool {
	upper := true
	for i := 0; i < len(key); i++ {
		c := key[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}

// trimSpace drops the spaces and tabs around s, as net/textproto does.
func trimSpace(s string) string {
	i, j := 0, len(s)
	for i < j && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	for j > i && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	return s[i:j]
}

// contentLength is s as a length of 1 to 18 digits, or -1.
func contentLength(s string) int64 {
	if len(s) == 0 || len(s) > 18 {
		return -1
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return -1
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n
}

// lengthBody is a body of a known length read from the connection's
// buffer; its last bytes come with io.EOF, as net/http's do, and a
// connection that ends early is io.ErrUnexpectedEOF.
type lengthBody struct {
	br   *bufio.Reader
	left int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	switch {
	case b.left == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }

// chunkedBody is a chunked body read from the connection's buffer by
// net/http's own chunk reader, then its trailer read as net/http reads
// it: usually the bare CRLF that ends an answer without trailer fields;
// otherwise header lines, which become the answer's Trailer.
type chunkedBody struct {
	src  io.Reader
	br   *bufio.Reader
	resp *http.Response
	err  error // io.EOF once the chunks and trailer are read, or the error that ended them
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.br.Buffered() == 0 {
		// More is to come (a last chunk at least): wait for it here, not
		// at the bottom of the chunk reader's calls (a chunk's line), as
		// exchange waits for the head; an error is the chunk reader's to
		// meet.
		b.br.Peek(1)
	}
	n, err := b.src.Read(p)
	if err == io.EOF {
		if err = readTrailer(b.br, b.resp); err == nil {
			err = io.EOF
		}
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

func (b *chunkedBody) Close() error { return nil }

var (
	errTrailerEOF  = errors.New("http: unexpected EOF reading trailer")
	errLongTrailer = errors.New("http: suspiciously long trailer after chunked body")
)

// readTrailer reads what follows a chunked body's last chunk, as
// net/http does: the bare CRLF of no trailer fields, or header lines
// ending in a blank line within the buffer's size, which become
// resp.Trailer (nil until then: readCommonHead declines a Trailer field).
// The transport's connections read through 512-byte buffers, so trailer
// fields over about 500 bytes are refused ("suspiciously long trailer"),
// where net/http's transport, with 4 KB buffers, takes up to 4 KB; the
// answers of inference servers have none.
//
//go:noinline
func readTrailer(br *bufio.Reader, resp *http.Response) error {
	buf, err := br.Peek(2)
	if bytes.Equal(buf, []byte("\r\n")) {
		br.Discard(2)
		return nil
	}
	if len(buf) < 2 {
		return errTrailerEOF
	}
	if err != nil {
		return err
	}
	if !blankLineAhead(br) {
		return errLongTrailer
	}
	fields, err := textproto.NewReader(br).ReadMIMEHeader()
	if err != nil {
		if err == io.EOF {
			return errTrailerEOF
		}
		return err
	}
	resp.Trailer = http.Header(fields)
	return nil
}

// blankLineAhead reports whether a CRLF CRLF comes before br's buffer is
// full, peeking further one byte at a time as net/http does.
func blankLineAhead(br *bufio.Reader) bool {
	for n := 4; ; n++ {
		buf, err := br.Peek(n)
		if bytes.HasSuffix(buf, []byte("\r\n\r\n")) {
			return true
		}
		if err != nil {
			return false
		}
	}
}
