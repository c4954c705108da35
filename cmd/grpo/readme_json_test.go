package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/promote"
)

// usageSection is docs/USAGE.md's text from the first line containing from
// up to the next line containing to.
func usageSection(t *testing.T, from, to string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "USAGE.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, from)
	if i < 0 {
		t.Fatalf("docs/USAGE.md has no %q", from)
	}
	j := strings.Index(s[i:], to)
	if j < 0 {
		t.Fatalf("docs/USAGE.md has no %q after %q", to, from)
	}
	return s[i : i+j]
}

// jsonKeys are the JSON keys of struct type v's fields (embedded structs
// flattened), "-" left out.
func jsonKeys(v any) []string {
	var keys []string
	typ := reflect.TypeOf(v)
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			keys = append(keys, jsonKeys(reflect.New(f.Type).Elem().Interface())...)
			continue
		}
		if name != "-" && name != "" {
			keys = append(keys, name)
		}
	}
	return keys
}

// TestUsageDescribesJSON: where docs/USAGE.md documents the export manifest
// and 'grpo compare --json', it names every key they write (it left out
// the manifest's format and exported, and compare's unmatched).
func TestUsageDescribesJSON(t *testing.T) {
	for _, c := range []struct {
		what, from, to string
		types          []any
	}{
		{"the export manifest", "Beside the adapter files, `grpo-checkpoint.json` records", "check an export with", []any{promote.Manifest{}}},
		{"grpo compare --json", "`grpo compare` takes two runs or two files", "## `grpo experiment`", []any{compareJSON{}, comparison{}, unmatchedN{}, compareRunJSON{}}},
	} {
		text := usageSection(t, c.from, c.to)
		for _, v := range c.types {
			for _, k := range jsonKeys(v) {
				if !strings.Contains(text, "`"+k+"`") && !strings.Contains(text, `"`+k+`"`) {
					t.Errorf("docs/USAGE.md on %s does not name %q (%T)", c.what, k, v)
				}
			}
		}
	}
}
