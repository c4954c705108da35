package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// summaryLines are the lines of a 'grpo run' output from its "run NAME
// (STATE)" header up to (not including) "finished in", trailing spaces
// trimmed: what depends on the config alone.
func summaryLines(out string) []string {
	var lines []string
	in := false
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimRight(l, " ")
		switch {
		case strings.HasPrefix(l, "run ") && strings.Contains(l, "(succeeded)"):
			in = true
		case strings.HasPrefix(l, "finished in"):
			in = false
		}
		if in {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestReadmeDefaultRun: the README's default-run table is what 'grpo run'
// prints with no arguments (results depend on the config alone).
func TestReadmeDefaultRun(t *testing.T) {
	if testing.Short() {
		t.Skip("plays the whole default run")
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const open = "```\n$ grpo run\n"
	_, block, ok := strings.Cut(string(readme), open)
	if !ok {
		t.Fatalf("README.md has no block starting %q", open)
	}
	block, _, _ = strings.Cut(block, "```")
	want := summaryLines(block)
	if len(want) < 18 {
		t.Fatalf("README's default-run block has %d summary lines; want the header, the table and the comparisons:\n%s", len(want), block)
	}
	dir := t.TempDir()
	code, out, errs := cli(t, "run", "--db", filepath.Join(dir, "grpo.db"))
	if code != 0 {
		t.Fatalf("grpo run: exit %d\n%s", code, errs)
	}
	got := summaryLines(out)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("README's default run differs from 'grpo run'; regenerate it.\nREADME:\n%s\n\ngrpo run:\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
}

// TestReadmeIsAGuide: the README stays a short user's guide (the
// reference is under docs/), and it installs grpo before its first
// example that calls the binary by name.
func TestReadmeIsAGuide(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	if n := strings.Count(readme, "\n"); n > 300 {
		t.Errorf("README.md has %d lines; keep it at most 300 and move reference material to docs/", n)
	}
	install := strings.Index(readme, "go install ./cmd/grpo")
	first := strings.Index(readme, "\n$ grpo ")
	if install < 0 || first < 0 || install > first {
		t.Errorf("README.md: 'go install ./cmd/grpo' at %d, first '$ grpo' example at %d; the install must come first", install, first)
	}
}
