package art

import (
	"os"
	"strings"
	"testing"
)

// FuzzReadStream feeds arbitrary bytes to the training stream parser: it
// must return lines or an error, never panic, and never report more lines
// than the input has.
func FuzzReadStream(f *testing.F) {
	f.Add("{\"loss\": 0.5, \"num_gradient_steps\": 2}\n{\"loss\": 0.25, \"num_gradient_steps\": 2}\n")
	f.Add("{\"num_gradient_steps\": 0, \"num_groups_trainable\": 0}\n")
	f.Add("{\"loss\": 0.5, \"num_gra")
	f.Add("\n\n[1]\n")
	f.Add("{\"num_gradient_steps\": 1e300}\n")
	f.Add("{\"loss\": NaN, \"grad_norm\": -Infinity, \"note\": \"Infinity\\\"\", \"num_gradient_steps\": 1}\n")
	f.Fuzz(func(t *testing.T, s string) {
		lines, err := readStream(strings.NewReader(s), nil)
		if err == nil && len(lines) > strings.Count(s, "\n") {
			t.Fatalf("%d lines from %d newlines", len(lines), strings.Count(s, "\n"))
		}
	})
}

// FuzzDetect feeds arbitrary documents to version detection: it must not
// panic, and a refusal must say what it found.
func FuzzDetect(f *testing.F) {
	for _, r := range []string{"0.3.11", "0.4.0", "0.5.0", "0.5.3"} {
		b, err := os.ReadFile("testdata/openapi-" + r + ".json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"paths": {"/healthcheck": {"get": null}}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		p, err := detect(doc)
		if err != nil && err.Error() == "" {
			t.Fatalf("refusal without a description")
		}
		if err == nil && p.Releases == "" {
			t.Fatalf("accepted without naming the releases")
		}
	})
}
