package grpo_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDomainImportsNoClient: the domain packages, grpo and rollout,
// depend on no client of a server: not go-openai, inference, trainer or
// httpx, nor the standard library's net packages. Outside the standard
// library they depend only on each other and gonum.
func TestDomainImportsNoClient(t *testing.T) {
	const module = "github.com/grpo-dev/grpo/"
	domain := []string{module + "grpo", module + "rollout"}
	out, err := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}"}, domain...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < len(domain) {
		t.Fatalf("go list -deps listed %d packages:\n%s", len(lines), out)
	}
	for _, line := range lines {
		path, std, _ := strings.Cut(line, " ")
		var ok bool
		if std == "true" {
			ok = path != "net" && !strings.HasPrefix(path, "net/")
		} else {
			ok = path == domain[0] || path == domain[1] || strings.HasPrefix(path, "gonum.org/v1/gonum/")
		}
		if !ok {
			t.Errorf("the domain packages depend on %s", path)
		}
	}
}
