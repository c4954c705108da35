package httpx

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"testing"
)

// commonHeads are answers of the kind inference servers send, which
// readCommonHead reads itself.
var commonHeads = []string{
	// vLLM (uvicorn)
	"HTTP/1.1 200 OK\r\ndate: Tue, 01 Dec 2026 05:04:02 GMT\r\nserver: uvicorn\r\ncontent-length: 5\r\ncontent-type: application/json\r\n\r\nhello",
	// net/http servers: the bench's fake, the trainer's fakes
	"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Tue, 01 Dec 2026 05:04:02 GMT\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 429 \r\nX-A: 1\r\nx-a:   2 \t\r\nX-Empty:\r\nContent-Length: 3\r\n\r\nabcdef",
	"HTTP/1.1 200\r\nContent-Length:007\r\n\r\nshort",
	// Node's http module; llama.cpp's server (cpp-httplib)
	"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Tue, 01 Dec 2026 09:03:57 GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 200 OK\r\nConnection: Keep-Alive\r\nKeep-Alive: timeout=5, max=5\r\nconnection:keep-alive \r\nContent-Length: 2\r\n\r\n{}",
	// chunked, as Go net/http servers send a body they did not measure
	"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Tue, 01 Dec 2026 05:04:02 GMT\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;ext=1\r\nlo\r\n0\r\n\r\n",
	"HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: Chunked\r\n\r\n5\r\nerror\r\n0\r\nX-Checksum: 1\r\nx-more: a\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	// ... and cut short or malformed: the body's error is net/http's
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\n",
}

func TestCommonHeadTaken(t *testing.T) {
	for _, a := range commonHeads {
		req, _ := http.NewRequest("POST", "http://x/v1/chat/completions", nil)
		br := bufio.NewReaderSize(bytes.NewReader([]byte(a)), 512)
		br.Peek(1)
		got := readCommonHead(br, req)
		if got == nil {
			t.Errorf("%q: not read as a common head", a)
			continue
		}
		compareWithReadResponse(t, []byte(a), 512, got, req)
	}
	// One string, one slice of values, the map, the answer and its body:
	// fewer allocations than http.ReadResponse makes of the same answer.
	req, _ := http.NewRequest("POST", "http://x/v1/chat/completions", nil)
	allocs := func(read func(*bufio.Reader)) float64 {
		return testing.AllocsPerRun(100, func() {
			br := bufio.NewReaderSize(bytes.NewReader([]byte(commonHeads[0])), 512)
			br.Peek(1)
			read(br)
		})
	}
	base := allocs(func(*bufio.Reader) {})
	ours := allocs(func(br *bufio.Reader) { readCommonHead(br, req) }) - base
	theirs := allocs(func(br *bufio.Reader) { http.ReadResponse(br, req) }) - base
	if ours > 7 || ours >= theirs {
		t.Errorf("%v allocations, http.ReadResponse %v", ours, theirs)
	}
}

func TestCommonHeadLeavesOthers(t *testing.T) {
	for _, a := range []string{
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n3\r\nhel\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nhel\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nhel\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTrailer: X-Checksum\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n0\r\nX-Checksum: 1\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nConnection: upgrade\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\nto the end",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 2\r\n\r\nok", // folded
		"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",                     // bare LF
		"HTTP/1.1 200 OK\r\nX: \xff\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nBad Key: 1\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", // head not yet whole
	} {
		req, _ := http.NewRequest("POST", "http://x/", nil)
		br := bufio.NewReaderSize(bytes.NewReader([]byte(a)), 512)
		br.Peek(1)
		if got := readCommonHead(br, req); got != nil {
			t.Errorf("%q: read as a common head", a)
		}
		if br.Buffered() != len(a) {
			t.Errorf("%q: %d of %d bytes left buffered", a, br.Buffered(), len(a))
		}
	}
}

// FuzzCommonHeadMatchesReadResponse: whenever readCommonHead reads an
// answer, http.ReadResponse reads the same answer from the same bytes;
// when it does not, it has consumed nothing.
func FuzzCommonHeadMatchesReadResponse(f *testing.F) {
	for _, a := range commonHeads {
		f.Add([]byte(a), uint16(512), false)
	}
	f.Add([]byte(commonHeads[0]), uint16(40), false)
	f.Add([]byte(commonHeads[1]), uint16(512), true)
	// a trailer longer than a small buffer: net/http refuses it from the
	// same buffer too
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-Long-Trailer-Field: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n"), uint16(44), false)
	f.Fuzz(func(t *testing.T, answer []byte, size uint16, head bool) {
		method := "POST"
		if head {
			method = "HEAD"
		}
		req, _ := http.NewRequest(method, "http://x/", nil)
		br := bufio.NewReaderSize(bytes.NewReader(answer), 16+int(size)%2048)
		br.Peek(1)
		before := br.Buffered()
		got := readCommonHead(br, req)
		if got == nil {
			if br.Buffered() != before {
				t.Fatalf("declined %q but consumed %d bytes", answer, before-br.Buffered())
			}
			return
		}
		compareWithReadResponse(t, answer, 16+int(size)%2048, got, req)
	})
}

// compareWithReadResponse: got is what http.ReadResponse reads from answer
// through a buffer of the same size (which bounds a chunked body's
// trailer for both).
func compareWithReadResponse(t *testing.T, answer []byte, size int, got *http.Response, req *http.Request) {
	t.Helper()
	want, err := http.ReadResponse(bufio.NewReaderSize(bytes.NewReader(answer), size), req)
	if err != nil {
		t.Fatalf("read %q, which http.ReadResponse refuses: %v", answer, err)
	}
	g := fmt.Sprintf("%q %d %s %d.%d %d close=%v te=%v trailer=%v", got.Status, got.StatusCode, got.Proto, got.ProtoMajor, got.ProtoMinor, got.ContentLength, got.Close, got.TransferEncoding, got.Trailer)
	w := fmt.Sprintf("%q %d %s %d.%d %d close=%v te=%v trailer=%v", want.Status, want.StatusCode, want.Proto, want.ProtoMajor, want.ProtoMinor, want.ContentLength, want.Close, want.TransferEncoding, want.Trailer)
	if g != w || got.Request != want.Request {
		t.Fatalf("%q:\n got %s\nwant %s", answer, g, w)
	}
	if !reflect.DeepEqual(got.Header, want.Header) {
		t.Fatalf("%q: header %v, want %v", answer, got.Header, want.Header)
	}
	// net/http makes some of its errors anew each time (a malformed
	// chunk): the same error is the same text.
	gb, gerr := io.ReadAll(got.Body)
	wb, werr := io.ReadAll(want.Body)
	if !bytes.Equal(gb, wb) || fmt.Sprint(gerr) != fmt.Sprint(werr) {
		t.Fatalf("%q: body %q (%v), want %q (%v)", answer, gb, gerr, wb, werr)
	}
	if !reflect.DeepEqual(got.Trailer, want.Trailer) {
		t.Fatalf("%q: trailer %v, want %v", answer, got.Trailer, want.Trailer)
	}
}

func TestCanonicalAddr(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000/v1": "127.0.0.1:8000",
		"http://localhost/v1":      "localhost:80",
		"http://[::1]:9/x":         "[::1]:9",
		"http://[::1]/x":           "[::1]:80",
		"http://host:/x":           "host:80",
	} {
		req, err := http.NewRequest("GET", in, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := canonicalAddr(req); got != want {
			t.Errorf("canonicalAddr(%s) = %q, want %q", in, got, want)
		}
	}
}
