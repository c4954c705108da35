package config_test

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/config"
)

// TestExamples parses and validates every config under examples/ (but
// examples/experiments/, which holds experiment files), as
// `grpo run --config` would, so the documented examples keep working.
func TestExamples(t *testing.T) {
	var files []string
	err := filepath.WalkDir("../examples", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && filepath.Base(path) == "experiments" {
			return filepath.SkipDir // experiment files, checked by package experiment
		}
		if ext := filepath.Ext(path); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no configs under examples/")
	}
	for _, path := range files {
		t.Run(strings.TrimPrefix(filepath.ToSlash(path), "../"), func(t *testing.T) {
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Run.DB == "" {
				cfg.Run.DB = "grpo.db"
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(filepath.ToSlash(path), "fleet/grpo.yaml") {
				in := cfg.Inference
				if len(in.Endpoints) != 2 || cfg.Trainer.Kind != config.TrainerJobs || in.Adapters.Inplace != config.InplaceAuto || time.Duration(in.OutageWindow) != 2*time.Minute {
					t.Fatalf("fleet example: endpoints %v, trainer %s, inplace %s, outage window %v; want 2 replicas, jobs, auto, 2m",
						in.Endpoints, cfg.Trainer.Kind, in.Adapters.Inplace, in.OutageWindow)
				}
			}
		})
	}
}
