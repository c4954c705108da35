package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestUsageNamesEveryFlag: docs/USAGE.md names every flag that each
// command's --help lists, so a new flag cannot go undocumented.
func TestUsageNamesEveryFlag(t *testing.T) {
	doc, err := os.ReadFile("../../docs/USAGE.md")
	if err != nil {
		t.Fatal(err)
	}
	flagLine := regexp.MustCompile(`(?m)^  (--?[a-z0-9-]+)`)
	n := 0
	for _, cmd := range [][]string{{"run"}, {"runs"}, {"best"}, {"promote"}, {"serve"}, {"watch"},
		{"refmodel", "serve"}, {"eval"}, {"compare"}, {"experiment"}, {"bench"}} {
		_, out, errs := cli(t, append(cmd, "--help")...)
		help := out + errs
		_, flags, ok := strings.Cut(help, "\nFlags:\n")
		if !ok {
			t.Errorf("grpo %s --help has no Flags: section:\n%s", strings.Join(cmd, " "), help)
			continue
		}
		for _, m := range flagLine.FindAllStringSubmatch(flags, -1) {
			name := "--" + strings.TrimLeft(m[1], "-")
			n++
			if !strings.Contains(string(doc), "`"+name+"`") && !strings.Contains(string(doc), "`"+name+" ") {
				t.Errorf("docs/USAGE.md does not name grpo %s %s", strings.Join(cmd, " "), name)
			}
		}
	}
	if n < 80 {
		t.Errorf("found %d flags in the commands' help; the commands have more", n)
	}
}
