package quote

import (
	"strings"
	"testing"
)

func TestBody(t *testing.T) {
	if got := Body([]byte("  <html>hi</html>\n")); got != `"<html>hi</html>"` {
		t.Fatalf("short body: %s", got)
	}
	long := strings.Repeat("a", Limit-1) + "é" + "tail"
	got := Body([]byte(long))
	// The two-byte é straddles the limit: cut before it, not inside it.
	if want := `"` + strings.Repeat("a", Limit-1) + `"...`; got != want {
		t.Fatalf("long body: %s", got)
	}
}
