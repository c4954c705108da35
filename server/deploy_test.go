package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/server"
	"github.com/prometheus/client_golang/prometheus"
	yaml "go.yaml.in/yaml/v3"
)

const deployDir = "../deploy"

// yamlDocs decodes every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

func TestDeployYAMLParses(t *testing.T) {
	var files []string
	filepath.WalkDir(deployDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return err
	})
	if len(files) < 6 {
		t.Fatalf("found %d YAML files under %s: %v", len(files), deployDir, files)
	}
	for _, f := range files {
		if len(yamlDocs(t, f)) == 0 {
			t.Errorf("%s: no YAML document", f)
		}
	}
}

func TestDeployK8s(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(deployDir, "k8s", "*.yaml"))
	kinds := map[string]bool{}
	for _, f := range files {
		for _, d := range yamlDocs(t, f) {
			kind, _ := d["kind"].(string)
			meta, _ := d["metadata"].(map[string]any)
			name, _ := meta["name"].(string)
			if d["apiVersion"] == nil || kind == "" || name == "" {
				t.Errorf("%s: object without apiVersion, kind or metadata.name: %v", f, d)
				continue
			}
			kinds[kind+"/"+name] = true
			if kind == "Deployment" || kind == "StatefulSet" {
				checkWorkload(t, f, name, d)
			}
		}
	}
	for _, want := range []string{"StatefulSet/grpo", "Service/grpo", "Deployment/vllm", "Service/vllm"} {
		if !kinds[want] {
			t.Errorf("k8s manifests lack %s (have %v)", want, kinds)
		}
	}
}

// checkWorkload checks that pod templates match their selector, and the
// vLLM and grpo specifics the design asks for.
func checkWorkload(t *testing.T, f, name string, d map[string]any) {
	spec := d["spec"].(map[string]any)
	sel := spec["selector"].(map[string]any)["matchLabels"].(map[string]any)
	tmpl := spec["template"].(map[string]any)
	labels := tmpl["metadata"].(map[string]any)["labels"].(map[string]any)
	for k, v := range sel {
		if labels[k] != v {
			t.Errorf("%s %s: selector %s=%v does not match the pod labels %v", f, name, k, v, labels)
		}
	}
	c := tmpl["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	text, _ := yaml.Marshal(c)
	switch name {
	case "vllm":
		for _, want := range []string{"--enable-auto-tool-choice", "--tool-call-parser=hermes", "--return-tokens-as-token-ids",
			"--logprobs-mode=processed_logprobs", "--enable-lora", "--max-lora-rank=8", "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "nvidia.com/gpu"} {
			if !strings.Contains(string(text), want) {
				t.Errorf("%s vllm container lacks %s", f, want)
			}
		}
	case "grpo":
		if spec["volumeClaimTemplates"] == nil {
			t.Errorf("%s: grpo StatefulSet has no volume claim for its bbolt file", f)
		}
		if !strings.Contains(string(text), "GRPO_TOKEN") {
			t.Errorf("%s: grpo listens beyond loopback without GRPO_TOKEN", f)
		}
	}
}

func TestDeployCompose(t *testing.T) {
	d := yamlDocs(t, filepath.Join(deployDir, "compose.yaml"))[0]
	services := d["services"].(map[string]any)
	volumes, _ := d["volumes"].(map[string]any)
	for _, want := range []string{"vllm", "trainer", "grpo", "prometheus", "grafana"} {
		if services[want] == nil {
			t.Errorf("compose.yaml lacks service %s", want)
		}
	}
	for name, s := range services {
		svc := s.(map[string]any)
		vols, _ := svc["volumes"].([]any)
		for _, v := range vols {
			src, _, _ := strings.Cut(v.(string), ":")
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				if _, err := os.Stat(filepath.Join(deployDir, src)); strings.HasPrefix(src, ".") && err != nil {
					t.Errorf("service %s mounts %s: %v", name, src, err)
				}
				continue
			}
			if _, ok := volumes[src]; !ok {
				t.Errorf("service %s uses volume %s, not defined under volumes", name, src)
			}
		}
		deps, _ := svc["depends_on"].([]any)
		for _, dep := range deps {
			if services[dep.(string)] == nil {
				t.Errorf("service %s depends on undefined %v", name, dep)
			}
		}
	}
	vllm, _ := yaml.Marshal(services["vllm"])
	for _, want := range []string{"--enable-lora", "--max-lora-rank=8", "--tool-call-parser=hermes", "--return-tokens-as-token-ids", "--logprobs-mode=processed_logprobs", "VLLM_ALLOW_RUNTIME_LORA_UPDATING"} {
		if !strings.Contains(string(vllm), want) {
			t.Errorf("compose vllm lacks %s", want)
		}
	}
	prom := yamlDocs(t, filepath.Join(deployDir, "prometheus", "prometheus.yml"))[0]
	jobs := prom["scrape_configs"].([]any)
	found := false
	for _, j := range jobs {
		jm := j.(map[string]any)
		if jm["job_name"] == "grpo" {
			found = strings.Contains(func() string { b, _ := yaml.Marshal(jm); return string(b) }(), "grpo:8080")
		}
	}
	if !found {
		t.Error("prometheus.yml does not scrape grpo:8080")
	}
}

var metricName = regexp.MustCompile(`\bgrpo_[a-z_]+`)

// TestGrafanaDashboard checks that the dashboard parses and queries only
// metrics the daemon registers, and that it covers the design's panels.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana", "dashboards", "grpo.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grpo.json: %v", err)
	}
	// The names the daemon registers, as it registers them.
	rec := &recorder{Registry: prometheus.NewRegistry()}
	server.New(server.Options{Registry: rec})
	registered := map[string]bool{}
	for _, n := range rec.names {
		registered[n] = true
	}
	if got, want := len(registered), len(server.MetricNames); got != want {
		t.Errorf("registered %d metrics (%v), MetricNames lists %d", got, rec.names, want)
	}
	for _, n := range server.MetricNames {
		if !registered[n] {
			t.Errorf("MetricNames lists %s, which is not registered", n)
		}
	}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
				if !registered[base] {
					t.Errorf("panel %q queries %s, which the daemon does not register", p.Title, m)
				}
				used[base] = true
			}
		}
	}
	for _, want := range []string{"grpo_reward_mean", "grpo_best_step", "grpo_llm_requests_total", "grpo_llm_request_duration_seconds", "grpo_trainer_job_duration_seconds"} {
		if !used[want] {
			t.Errorf("dashboard does not chart %s", want)
		}
	}
}

// recorder is a registry that remembers the names of what is registered.
type recorder struct {
	*prometheus.Registry
	names []string
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names = append(r.names, m[1])
		}
	}
	return r.Registry.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}
