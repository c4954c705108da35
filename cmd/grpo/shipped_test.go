package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/experiment"
	"github.com/grpo-dev/grpo/run"
	yaml "go.yaml.in/yaml/v3"
)

// notGrpos are the YAML files the repository ships for other programs.
var notGrpos = []string{
	"deploy/compose.yaml",
	"deploy/grafana/provisioning/dashboards/grpo.yaml",
	"deploy/grafana/provisioning/datasources/prometheus.yaml",
	"deploy/k8s/grpo.yaml",
	"deploy/k8s/trainer.yaml",
	"deploy/k8s/vllm.yaml",
	"deploy/prometheus/prometheus.yml",
}

// TestShippedConfigsValid reads every YAML file the repository ships (but
// those of other programs, listed in notGrpos), and every yaml block of its
// markdown, with grpo's own reader for what it is: a run config (checked
// as grpo run checks it), an experiment file (each arm's config checked;
// a .yaml.in template with its placeholders filled), a daemon's --peers
// file or a grpo eval --models list. So a new bound on a key cannot refuse
// a documented example, DESIGN's configuration (config/testdata/design.yaml)
// included.
func TestShippedConfigsValid(t *testing.T) {
	root := "../.."
	type source struct {
		name string // path from the root, with the block's line for markdown
		data []byte
	}
	var sources []source
	var skipped []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		switch {
		case slices.Contains(notGrpos, rel):
			skipped = append(skipped, rel)
		case strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".yaml.in"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources = append(sources, source{rel, b})
		case strings.HasSuffix(name, ".md"):
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			lines := strings.Split(string(b), "\n")
			for i := 0; i < len(lines); i++ {
				if lines[i] != "```yaml" && lines[i] != "```yml" {
					continue
				}
				start := i + 1
				for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				}
				sources = append(sources, source{rel + ":" + itoa(start), []byte(strings.Join(lines[start:i], "\n"))})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != len(notGrpos) {
		t.Errorf("skipped %v; notGrpos lists %v, which are not all there any more", skipped, notGrpos)
	}
	sections := map[string]bool{}
	for _, k := range configKeys(reflect.TypeOf(config.Config{}), "") {
		sections[strings.SplitN(k, ".", 2)[0]] = true
	}
	// A .yaml.in template's placeholders, as its script fills them.
	fill := strings.NewReplacer("@VLLM_URL@", "http://127.0.0.1:8000/v1", "@TRAINER_URL@", "http://127.0.0.1:7000",
		"@MODEL@", "tiny", "@MODEL_DIR@", "/models/tiny", "@DIR@", "stack", "@OUT@", "out", "@OUT_PAPER@", "out-paper")
	counts := map[string]int{}
	for _, src := range sources {
		data := []byte(fill.Replace(string(src.data)))
		var doc yaml.Node
		if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
			t.Errorf("%s: not a YAML document: %v", src.name, err)
			continue
		}
		top := doc.Content[0]
		var keys []string
		if top.Kind == yaml.MappingNode {
			for i := 0; i < len(top.Content); i += 2 {
				keys = append(keys, top.Content[i].Value)
			}
		}
		file := filepath.Join(t.TempDir(), "file.yaml")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		var kind string
		switch {
		case top.Kind == yaml.SequenceNode:
			kind = "models list"
			if _, err := readTargets(file); err != nil {
				t.Errorf("%s: as grpo eval --models: %v", src.name, err)
			}
		case slices.Contains(keys, "experiment"):
			kind = "experiment"
			if _, err := experiment.Load(file); err != nil {
				t.Errorf("%s: as an experiment file: %v", src.name, err)
			}
		case slices.Contains(keys, "trainers"):
			kind = "peers"
			if _, err := config.LoadPeers(file); err != nil {
				t.Errorf("%s: as grpo serve --peers: %v", src.name, err)
			}
		case len(keys) > 0 && !slices.ContainsFunc(keys, func(k string) bool { return !sections[k] }):
			kind = "run config"
			cfg, err := config.Parse(data, config.WithEmbedded(run.ConfigDefaults()))
			if err != nil {
				t.Errorf("%s: as a run config: %v", src.name, err)
				continue
			}
			if namesPeers(cfg) {
				// A config posted to the compose or k8s daemon names the
				// peers deploy/peers.yaml declares; resolved as the daemon
				// resolves it.
				p, err := config.LoadPeers(filepath.Join(root, "deploy", "peers.yaml"))
				if err == nil {
					err = config.ResolvePeers(&cfg, p, config.ResolveOptions{})
				}
				if err != nil {
					t.Errorf("%s: as a run config posted to deploy/compose.yaml's daemon: %v", src.name, err)
					continue
				}
			}
			if src.name == "config/testdata/design.yaml" {
				// DESIGN §10 pairs its endpoint with the embedded
				// trainer, which cannot work; its values are what is
				// checked here.
				cfg.Trainer.Kind = config.TrainerJobs
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("%s: as a run config: %v", src.name, err)
			}
		default:
			t.Errorf("%s: top-level keys %v: not a run config, an experiment, a peers file nor a models list; add it to notGrpos if it belongs to another program", src.name, keys)
			continue
		}
		counts[kind]++
	}
	t.Logf("checked %v; skipped %v", counts, skipped)
	// What the repository ships today, so that a broken walk fails.
	if counts["run config"] < 10 || counts["experiment"] < 10 || counts["peers"] < 1 || counts["models list"] < 2 {
		t.Errorf("checked %v: fewer than the repository ships", counts)
	}
}

// namesPeers says whether cfg names a daemon's declared peers ({peer: NAME}).
func namesPeers(cfg config.Config) bool {
	for _, e := range cfg.Inference.Endpoints {
		if e.Peer != "" {
			return true
		}
	}
	return cfg.Trainer.Peer != ""
}

// TestCPULearningExperimentIsTheRecipe: the shipped experiments on the CPU
// stack train what deploy/cpu/up.sh writes (examples/cpu/grpo.yaml, which
// TestCPUExampleMatchesUpScript holds to up.sh): each arm's config is the
// example's but for the run's name, seed, store, test split and reward;
// and cpu-learning-paper's shaped runs are cpu-learning's own.
func TestCPULearningExperimentIsTheRecipe(t *testing.T) {
	ex, err := config.Load("../../examples/cpu/grpo.yaml", config.WithEmbedded(run.ConfigDefaults()))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	load := func(name string) *experiment.File {
		tmpl, err := os.ReadFile("../../examples/experiments/" + name + ".yaml.in")
		if err != nil {
			t.Fatal(err)
		}
		fill := strings.NewReplacer("@VLLM_URL@", ex.Inference.Endpoints[0].URL, "@TRAINER_URL@", ex.Trainer.URL,
			"@MODEL@", ex.Inference.Model, "@MODEL_DIR@", ex.Trainer.BaseModel, "@DIR@", dir, "@OUT@", "out", "@OUT_PAPER@", "out-paper")
		file := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(file, []byte(fill.Replace(string(tmpl))), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := experiment.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	shaped, paper := load("cpu-learning"), load("cpu-learning-paper")
	if len(shaped.Seeds) < 3 || len(paper.Seeds) < 2 || !slices.Equal(paper.Seeds, shaped.Seeds[:min(len(paper.Seeds), len(shaped.Seeds))]) {
		t.Errorf("seeds: cpu-learning %v, cpu-learning-paper %v: want >= 3, and the paper file's among the first of them", shaped.Seeds, paper.Seeds)
	}
	for _, f := range []*experiment.File{shaped, paper} {
		if !reflect.DeepEqual(f.Test.N, []int{5, 10}) || f.Test.Episodes < 30 {
			t.Errorf("test n %v x %d episodes: want n = 5, 10 on >= 30 tables", f.Test.N, f.Test.Episodes)
		}
		for _, a := range f.Arms {
			cfg, err := f.Config(a.Name, 2)
			if err != nil {
				t.Fatal(err)
			}
			if string(cfg.Reward.Function) != a.Name {
				t.Errorf("arm %s trains with reward %s", a.Name, cfg.Reward.Function)
			}
			want := ex
			want.Run.Name, want.Run.Seed, want.Run.DB = cfg.Run.Name, cfg.Run.Seed, cfg.Run.DB
			want.Test, want.Reward = cfg.Test, cfg.Reward
			if !reflect.DeepEqual(cfg, want) {
				t.Errorf("arm %s:\n  %+v\nexamples/cpu/grpo.yaml:\n  %+v", a.Name, cfg, want)
			}
		}
	}
	a, errA := shaped.Config("shaped", 1)
	b, errB := paper.Config("shaped", 1)
	if errA != nil || errB != nil || !reflect.DeepEqual(a, b) || !reflect.DeepEqual(shaped.Test, paper.Test) {
		t.Errorf("cpu-learning-paper's shaped runs are not cpu-learning's: %v %v\n  %+v\n  %+v", errA, errB, a, b)
	}
	if len(paper.Arms) != 2 || paper.Arms[1].Name != "paper" {
		t.Errorf("cpu-learning-paper's arms: %+v, want shaped and paper", paper.Arms)
	}
}
