package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/experiment"
)

// TestCoordinationGapFiles: the shipped files of experiment 4 are what
// their scripts and docs say: two run configs on the embedded backend
// whose test split is the table's (n = 5, 10, 15, 30 tables from seed
// 2000000), the second at the study-regime strength, and a models file
// for grpo eval --models naming key variables, not keys.
func TestCoordinationGapFiles(t *testing.T) {
	dir := "../../examples/experiments/coordination-gap"
	for file, coord := range map[string]float64{"run.yaml": 0, "run-study.yaml": -0.7} {
		cfg, err := config.Load(filepath.Join(dir, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		cfg.Run.DB = "x.db"
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if !cfg.Embedded() || cfg.Run.Steps != 16 || cfg.Test.Seed != 2000000 || cfg.Test.Episodes != 30 ||
			len(cfg.Test.N) != 3 || cfg.Test.N[0] != 5 || cfg.Test.N[1] != 10 || cfg.Test.N[2] != 15 || cfg.Trainer.BaseCoordination != coord {
			t.Fatalf("%s: %+v %+v base_coordination %v", file, cfg.Run, cfg.Test, cfg.Trainer.BaseCoordination)
		}
	}
	ts, err := readTargets(filepath.Join(dir, "endpoints.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Name != "Qwen/Qwen3-14B" || ts[1].APIKeyEnv != "OPENAI_API_KEY" || !ts[1].OmitTokenIDs || ts[0].OmitTokenIDs {
		t.Fatalf("endpoints.yaml: %+v", ts)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "endpoints.yaml"))
	if strings.Contains(string(b), "sk-") {
		t.Fatal("endpoints.yaml holds something like a key")
	}
}

// TestCPUExperimentTemplate: the CPU stack's experiment template, filled
// in as examples/experiments/cpu-reward-shaping.sh fills it, is an
// experiment file of 2 arms x 2 seeds against the stack's endpoints.
func TestCPUExperimentTemplate(t *testing.T) {
	b, err := os.ReadFile("../../examples/experiments/cpu-reward-shaping.yaml.in")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := strings.NewReplacer("@VLLM_URL@", "http://127.0.0.1:9/v1", "@TRAINER_URL@", "http://127.0.0.1:8", "@MODEL@", "tiny-qwen3",
		"@MODEL_DIR@", "/cache/tinymodel", "@DIR@", dir, "@OUT@", filepath.Join(dir, "out")).Replace(string(b))
	if strings.Contains(s, "@") {
		t.Fatalf("a placeholder the script does not fill:\n%s", s)
	}
	path := filepath.Join(dir, "experiment.yaml")
	os.WriteFile(path, []byte(s), 0o644)
	f, err := experiment.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "cpu-reward-shaping" || len(f.Seeds) != 2 || len(f.Arms) != 2 {
		t.Fatalf("%+v", f)
	}
	cfg, err := f.Config("paper", 2)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Embedded() || cfg.Inference.Endpoints[0].URL != "http://127.0.0.1:9/v1" || cfg.Trainer.URL != "http://127.0.0.1:8" ||
		cfg.Trainer.BaseModel != "/cache/tinymodel" || cfg.Inference.Model != "tiny-qwen3" || cfg.Run.Seed != 2 || cfg.Reward.Function != "paper" {
		t.Fatalf("paper/2 config: %+v %+v %+v", cfg.Inference, cfg.Trainer, cfg.Run)
	}
}
