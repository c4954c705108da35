package server

import (
	"runtime"
	"strings"
	"testing"
)

// TestPathKey names the first key that chooses a file path, with its
// full dotted path.
func TestPathKey(t *testing.T) {
	for doc, want := range map[string]string{
		"run: {steps: 2}":                          "",
		"run: {db: x.db}":                          "run.db",
		"inference: {adapters: {adapter_dir: /x}}": "inference.adapters.adapter_dir",
		"a: [{b: {c: {log_file: y}}}]":             "a.b.c.log_file",
		"a: {b: 1}\nc: {d_path: z}":                "c.d_path",
	} {
		if got, err := pathKey([]byte(doc)); err != nil || got != want {
			t.Errorf("pathKey(%q) = %q, %v; want %q", doc, got, err, want)
		}
	}
}

// TestPathKeyDeepDocument: a document nested thousands of levels deep is
// walked in memory linear in its size (building each level's dotted path
// took memory quadratic in the depth: 16 such 50 KB bodies at once took
// the daemon to 1.9 GB).
func TestPathKeyDeepDocument(t *testing.T) {
	const depth = 9000
	doc := "run: {steps: 1}\ninference: {chat_template_kwargs: " + strings.Repeat("{a: ", depth) + "1" + strings.Repeat("}", depth) + "}\n"
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if key, err := pathKey([]byte(doc)); err != nil || key != "" {
		t.Fatalf("pathKey of a deep document: %q, %v", key, err)
	}
	runtime.ReadMemStats(&after)
	// The document's nodes take a few MB; the dotted paths of every level
	// (2 bytes a level, summed over 9,000 levels) would take 81 MB.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 40<<20 {
		t.Fatalf("pathKey of a %d-level document allocated %d MB", depth, alloc>>20)
	}
}
