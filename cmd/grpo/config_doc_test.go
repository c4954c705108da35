package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/run"
)

// configKeys walks t's yaml tags: every key the config parser accepts
// that holds a value or a list, dotted (a mapping's keys stand for it); a
// list's element keys are written list[].key.
func configKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "" || tag == "-" || !f.IsExported() {
			continue
		}
		key := prefix + tag
		ft := f.Type
		if ft.Kind() != reflect.Struct || ft.PkgPath() == "time" {
			out = append(out, key)
		}
		if ft.Kind() == reflect.Slice {
			ft, key = ft.Elem(), key+"[]"
		}
		if ft.Kind() == reflect.Struct {
			out = append(out, configKeys(ft, key+".")...)
		}
	}
	return out
}

func TestConfigDocNamesEveryKey(t *testing.T) {
	doc, err := os.ReadFile("../../docs/CONFIG.md")
	if err != nil {
		t.Fatal(err)
	}
	keys := configKeys(reflect.TypeOf(config.Config{}), "")
	if len(keys) < 55 {
		t.Fatalf("walked only %d keys: %v", len(keys), keys)
	}
	for _, k := range keys {
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("docs/CONFIG.md does not document `%s`", k)
		}
	}
	// Help texts point there, not to design notes the user cannot see.
	for _, f := range []string{"run.go", "cli.go", "serve.go"} {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), "DESIGN §") {
			t.Errorf("%s cites DESIGN §", f)
		}
	}
	_, out, _ := cli(t, "run", "--help")
	if !strings.Contains(out, "docs/CONFIG.md") {
		t.Errorf("grpo run --help does not point to docs/CONFIG.md:\n%s", out)
	}
}

// yamlBlocks returns the ```yaml blocks of a markdown file.
func yamlBlocks(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// TestUsageConfigBlockRuns runs docs/USAGE.md's configuration block as
// copied (one step) on the embedded backend, with no warning.
func TestUsageConfigBlockRuns(t *testing.T) {
	var block string
	for _, b := range yamlBlocks(t, "../../docs/USAGE.md") {
		if strings.Contains(b, "curriculum:") && strings.Contains(b, "trainer:") {
			block = b
		}
	}
	if block == "" {
		t.Fatal("docs/USAGE.md has no configuration block")
	}
	cfg, err := config.Parse([]byte(block), config.WithEmbedded(run.ConfigDefaults()))
	if err != nil {
		t.Fatalf("docs/USAGE.md block: %v", err)
	}
	if cfg.Inference.Model != refmodel.BaseModelName || cfg.Trainer.Hyperparameters.LearningRate != refmodel.DefaultLearningRate {
		t.Fatalf("docs/USAGE.md block on the embedded backend: model %q, learning rate %v", cfg.Inference.Model, cfg.Trainer.Hyperparameters.LearningRate)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "run.yaml")
	os.WriteFile(file, []byte(block), 0o644)
	code, out, errs := cli(t, "run", "--config", file, "--db", filepath.Join(dir, "r.db"), "--steps", "1", "--quiet")
	if code != 0 || strings.Contains(errs, "warning") || !strings.Contains(out, "run dp5-shaped (succeeded)") {
		t.Fatalf("docs/USAGE.md block as copied: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestCONFIGExamplesParse: the reference's examples are valid files.
func TestCONFIGExamplesParse(t *testing.T) {
	blocks := yamlBlocks(t, "../../docs/CONFIG.md")
	if len(blocks) != 2 {
		t.Fatalf("%d yaml blocks in docs/CONFIG.md, want 2", len(blocks))
	}
	for _, b := range blocks {
		if _, err := config.Parse([]byte(b), config.WithEmbedded(run.ConfigDefaults())); err != nil {
			t.Errorf("%v:\n%s", err, b)
		}
	}
}

// TestNoUpdateWarnings: grpo run prints the run's warning of a learning
// rate the embedded backend does not learn with (the rule is the run
// package's: run.TestStartWarnings) once, on its log.
func TestNoUpdateWarnings(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "run.yaml")
	os.WriteFile(file, []byte("trainer: {hyperparameters: {learning_rate: 5.0e-6}}\nvalidation: {episodes: 2}\n"), 0o644)
	code, _, errs := cli(t, "run", "--config", file, "--db", filepath.Join(dir, "r.db"), "--steps", "1", "--quiet")
	if code != 0 || strings.Count(errs, "trainer.hyperparameters.learning_rate 5e-06 is far from") != 1 {
		t.Fatalf("exit %d, want the warning once: %s", code, errs)
	}
}
