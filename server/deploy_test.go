package server_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/config"
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
		var deps []string
		switch d := svc["depends_on"].(type) {
		case []any: // short form: a list of names
			for _, dep := range d {
				deps = append(deps, dep.(string))
			}
		case map[string]any: // long form: name -> {condition: ...}
			for dep := range d {
				deps = append(deps, dep)
			}
		}
		for _, dep := range deps {
			if services[dep] == nil {
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

// imagePinned reports why an image reference is not pinned to a version
// ("" when it is): it needs a tag other than latest, or a digest.
func imagePinned(image string) string {
	if strings.Contains(image, "@sha256:") {
		return ""
	}
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	switch {
	case !ok || tag == "":
		return "has no tag"
	case tag == "latest" || strings.Contains(tag, "$"):
		return "is not pinned (tag " + tag + ")"
	}
	return ""
}

func TestDeployImagePinCheck(t *testing.T) {
	for image, pinned := range map[string]bool{
		"vllm/vllm-openai:v0.32.0":                 true,
		"ghcr.io/grpo-dev/trainer:0.1.0":           true,
		"localhost:5000/trainer:0.1.0":             true,
		"python:3.11.13-slim-bookworm":             true,
		"vllm/vllm-openai@sha256:0123456789abcdef": true,
		"vllm/vllm-openai:latest":                  false,
		"vllm/vllm-openai":                         false,
		"localhost:5000/trainer":                   false,
		"ghcr.io/x/trainer:${TAG:-latest}":         false,
	} {
		if got := imagePinned(image) == ""; got != pinned {
			t.Errorf("imagePinned(%q): pinned %v, want %v", image, got, pinned)
		}
	}
}

// composeServices returns compose.yaml's services.
func composeServices(t *testing.T) map[string]any {
	t.Helper()
	d := yamlDocs(t, filepath.Join(deployDir, "compose.yaml"))[0]
	return d["services"].(map[string]any)
}

// k8sPodSpecs returns the pod spec of each Deployment and StatefulSet in
// deploy/k8s, by name.
func k8sPodSpecs(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(deployDir, "k8s", "*.yaml"))
	pods := map[string]map[string]any{}
	for _, f := range files {
		for _, d := range yamlDocs(t, f) {
			if d["kind"] != "Deployment" && d["kind"] != "StatefulSet" {
				continue
			}
			name := d["metadata"].(map[string]any)["name"].(string)
			tmpl := d["spec"].(map[string]any)["template"].(map[string]any)
			pods[name] = tmpl["spec"].(map[string]any)
		}
	}
	return pods
}

func podContainers(pod map[string]any) []map[string]any {
	var cs []map[string]any
	for _, key := range []string{"initContainers", "containers"} {
		list, _ := pod[key].([]any)
		for _, c := range list {
			cs = append(cs, c.(map[string]any))
		}
	}
	return cs
}

// TestDeployImagesPinned checks that no image of compose.yaml, of the k8s
// manifests or of the trainer's Dockerfile floats (no :latest, no tagless).
func TestDeployImagesPinned(t *testing.T) {
	n := 0
	for name, s := range composeServices(t) {
		image, _ := s.(map[string]any)["image"].(string)
		if image == "" {
			continue // built from the repository (grpo)
		}
		n++
		if why := imagePinned(image); why != "" {
			t.Errorf("compose.yaml service %s: image %s %s", name, image, why)
		}
	}
	for name, pod := range k8sPodSpecs(t) {
		for _, c := range podContainers(pod) {
			n++
			image, _ := c["image"].(string)
			if why := imagePinned(image); why != "" {
				t.Errorf("k8s %s container %v: image %q %s", name, c["name"], image, why)
			}
		}
	}
	df, err := os.ReadFile(filepath.Join(deployDir, "trainer", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(string(df), -1)
	if len(froms) == 0 {
		t.Error("deploy/trainer/Dockerfile has no FROM")
	}
	for _, m := range froms {
		n++
		if why := imagePinned(m[1]); why != "" {
			t.Errorf("deploy/trainer/Dockerfile: FROM %s %s", m[1], why)
		}
		if !strings.HasPrefix(m[1], "python:3.11") {
			t.Errorf("deploy/trainer/Dockerfile: FROM %s, want a python:3.11 base (the trainer's pins are for 3.11)", m[1])
		}
	}
	if n < 8 {
		t.Errorf("checked %d images, want at least vLLM, trainer, Prometheus, Grafana (compose), grpo, vLLM, trainer (k8s) and the Dockerfile base", n)
	}
}

// argValue returns the value of --flag=value or "--flag value" in args.
func argValue(args []string, flag string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
		if a == flag && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func stringList(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// checkTrainerArgs checks what vLLM and the trainer must agree on: the
// trainer writes under the adapters mount, reads logprobs as vLLM computes
// them, and maps vLLM's served model name to a model directory vLLM serves.
func checkTrainerArgs(t *testing.T, where string, vllmArgs, trainerArgs []string, adapterMount string) {
	t.Helper()
	dataDir, ok := argValue(trainerArgs, "--data-dir")
	if !ok || !strings.HasPrefix(dataDir+"/", adapterMount+"/") {
		t.Errorf("%s: trainer --data-dir %q is not under the shared adapters mount %s", where, dataDir, adapterMount)
	}
	if mode, _ := argValue(vllmArgs, "--logprobs-mode"); mode == "processed_logprobs" {
		if tm, _ := argValue(trainerArgs, "--logprobs-mode"); tm != "processed" {
			t.Errorf("%s: vLLM reports processed_logprobs but the trainer's --logprobs-mode is %q, want processed", where, tm)
		}
	}
	served, _ := argValue(vllmArgs, "--served-model-name")
	model, _ := argValue(vllmArgs, "--model")
	if want := served + "=" + model; served == "" || !containsString(trainerArgs, "--model="+want) {
		t.Errorf("%s: trainer args %v lack --model=%s (vLLM's served name mapped to the directory vLLM serves)", where, trainerArgs, want)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestDeployComposeSharesAdapters checks that vLLM and the trainer mount the
// adapters volume at the same path, so the path the trainer reports is the
// path vLLM loads, and that each has a GPU of its own.
func TestDeployComposeSharesAdapters(t *testing.T) {
	services := composeServices(t)
	mounts := map[string]string{}
	for _, name := range []string{"vllm", "trainer"} {
		svc := services[name].(map[string]any)
		for _, v := range stringList(svc["volumes"]) {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[0] == "adapters" {
				mounts[name] = parts[1]
			}
		}
		if mounts[name] == "" {
			t.Fatalf("compose service %s does not mount the adapters volume", name)
		}
	}
	if mounts["vllm"] != mounts["trainer"] {
		t.Errorf("adapters mounted at %s in vllm and %s in trainer; they must be the same path", mounts["vllm"], mounts["trainer"])
	}
	vllm := services["vllm"].(map[string]any)
	trainer := services["trainer"].(map[string]any)
	checkTrainerArgs(t, "compose.yaml", stringList(vllm["command"]), stringList(trainer["command"]), mounts["trainer"])

	gpus := map[string]string{}
	for _, name := range []string{"vllm", "trainer"} {
		b, _ := yaml.Marshal(services[name].(map[string]any)["deploy"])
		var d struct {
			Resources struct {
				Reservations struct {
					Devices []struct {
						DeviceIDs []string `yaml:"device_ids"`
					} `yaml:"devices"`
				} `yaml:"reservations"`
			} `yaml:"resources"`
		}
		if err := yaml.Unmarshal(b, &d); err != nil || len(d.Resources.Reservations.Devices) != 1 {
			t.Fatalf("compose service %s: no GPU reservation (%v)", name, err)
		}
		gpus[name] = strings.Join(d.Resources.Reservations.Devices[0].DeviceIDs, ",")
	}
	if gpus["vllm"] == "" || gpus["vllm"] == gpus["trainer"] {
		// Sharing one GPU is allowed only with vLLM's memory capped well below the whole GPU.
		util, _ := argValue(stringList(vllm["command"]), "--gpu-memory-utilization")
		frac, err := strconv.ParseFloat(util, 64)
		if gpus["vllm"] == "" || err != nil || frac > 0.6 {
			t.Errorf("vLLM (GPUs %q) and the trainer (GPUs %q) are not split: give each its own device_ids, or cap vLLM's --gpu-memory-utilization (%q)", gpus["vllm"], gpus["trainer"], util)
		}
	}
}

// TestDeployK8sSharesAdapters checks the same in the Kubernetes manifests:
// the volume backed by the claim "adapters" is mounted at one path in vLLM
// and the trainer.
func TestDeployK8sSharesAdapters(t *testing.T) {
	pods := k8sPodSpecs(t)
	mounts := map[string]string{}
	args := map[string][]string{}
	for _, name := range []string{"vllm", "trainer"} {
		pod := pods[name]
		if pod == nil {
			t.Fatalf("deploy/k8s has no workload %s", name)
		}
		volName := ""
		vols, _ := pod["volumes"].([]any)
		for _, v := range vols {
			vm := v.(map[string]any)
			if pvc, ok := vm["persistentVolumeClaim"].(map[string]any); ok && pvc["claimName"] == "adapters" {
				volName = vm["name"].(string)
			}
		}
		if volName == "" {
			t.Fatalf("k8s %s: no volume from the claim adapters", name)
		}
		c := pod["containers"].([]any)[0].(map[string]any)
		args[name] = stringList(c["args"])
		vms, _ := c["volumeMounts"].([]any)
		for _, m := range vms {
			mm := m.(map[string]any)
			if mm["name"] == volName {
				mounts[name], _ = mm["mountPath"].(string)
			}
		}
		if mounts[name] == "" {
			t.Fatalf("k8s %s: container %v does not mount volume %s", name, c["name"], volName)
		}
	}
	if mounts["vllm"] != mounts["trainer"] {
		t.Errorf("k8s: adapters mounted at %s in vllm and %s in trainer; they must be the same path", mounts["vllm"], mounts["trainer"])
	}
	checkTrainerArgs(t, "k8s", args["vllm"], args["trainer"], mounts["trainer"])
}

// TestCPUExampleMatchesUpScript checks that examples/cpu/grpo.yaml is the
// config deploy/cpu/up.sh writes, with its placeholders where up.sh puts the
// stack's URLs, model directory and run directory.
func TestCPUExampleMatchesUpScript(t *testing.T) {
	up, err := os.ReadFile(filepath.Join(deployDir, "cpu", "up.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)cat >"\$dir/\.grpo\.yaml\.tmp" <<EOF\n(.*?)\nEOF\n`).FindSubmatch(up)
	if m == nil {
		t.Fatal("deploy/cpu/up.sh: no here-document writing grpo.yaml")
	}
	example, err := os.ReadFile("../examples/cpu/grpo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ex map[string]any
	if err := yaml.Unmarshal(example, &ex); err != nil {
		t.Fatalf("examples/cpu/grpo.yaml: %v", err)
	}
	at := func(path ...string) string {
		var v any = ex
		for _, p := range path {
			switch x := v.(type) {
			case map[string]any:
				v = x[p]
			case []any:
				v = x[0].(map[string]any)[p]
			}
		}
		s, _ := v.(string)
		return s
	}
	dir := strings.TrimSuffix(at("run", "db"), "/grpo.db")
	vars := strings.NewReplacer(
		"$dir", dir,
		"$vllm_url", at("inference", "endpoints", "url"),
		"$model_name", at("inference", "model"),
		"$trainer_url", at("trainer", "url"),
		"$model_dir", at("trainer", "base_model"),
	)
	script := vars.Replace(string(m[1]))
	if strings.Contains(script, "$") {
		t.Fatalf("up.sh's grpo.yaml has a variable this test does not know: %s", script)
	}
	var gen map[string]any
	if err := yaml.Unmarshal([]byte(script), &gen); err != nil {
		t.Fatalf("up.sh's grpo.yaml: %v", err)
	}
	for _, key := range []string{"run", "env", "reward", "grpo", "inference", "trainer", "validation"} {
		if !reflect.DeepEqual(ex[key], gen[key]) {
			t.Errorf("examples/cpu/grpo.yaml %s:\n  %v\nup.sh writes:\n  %v", key, ex[key], gen[key])
		}
	}
	if !reflect.DeepEqual(ex, gen) {
		t.Errorf("examples/cpu/grpo.yaml and up.sh's grpo.yaml differ in their top-level keys")
	}
	if at("inference", "model") != "tiny-qwen3" {
		t.Errorf("example serves %q, up.sh serves tiny-qwen3", at("inference", "model"))
	}
}

// TestDeployDaemonReachesTrainer: the trainer of compose.yaml and of the
// k8s manifests requires a bearer key (--api-key-env), so the daemon there
// must read a peers file declaring that trainer with the same variable, and
// have the variable in its environment: otherwise every job it posts is 401.
func TestDeployDaemonReachesTrainer(t *testing.T) {
	check := func(where string, grpoArgs, trainerArgs, grpoEnv []string, peers []byte) {
		t.Helper()
		key, ok := argValue(trainerArgs, "--api-key-env")
		if !ok {
			t.Fatalf("%s: the trainer has no --api-key-env (%v)", where, trainerArgs)
		}
		if _, ok := argValue(grpoArgs, "--peers"); !ok {
			t.Fatalf("%s: the daemon has no --peers file (%v)", where, grpoArgs)
		}
		p, err := config.ParsePeers(peers)
		if err != nil {
			t.Fatalf("%s: peers file: %v", where, err)
		}
		var found bool
		for name, tr := range p.Trainers {
			if strings.Contains(tr.URL, "://trainer:7000") {
				found = true
				if tr.Kind != config.TrainerJobs || tr.APIKeyEnv != key {
					t.Errorf("%s: trainer peer %s: kind %q, api_key_env %q; want jobs, %s", where, name, tr.Kind, tr.APIKeyEnv, key)
				}
			}
		}
		if !found {
			t.Errorf("%s: the peers file declares no trainer at http://trainer:7000: %+v", where, p.Trainers)
		}
		if !strings.Contains(strings.Join(grpoEnv, " "), key) {
			t.Errorf("%s: the daemon's environment lacks %s (%v)", where, key, grpoEnv)
		}
	}

	services := composeServices(t)
	grpoSvc := services["grpo"].(map[string]any)
	grpoArgs := stringList(grpoSvc["command"])
	peersPath, _ := argValue(grpoArgs, "--peers")
	var peers []byte
	for _, v := range stringList(grpoSvc["volumes"]) {
		if src, dst, ok := strings.Cut(strings.TrimSuffix(v, ":ro"), ":"); ok && dst == peersPath {
			b, err := os.ReadFile(filepath.Join(deployDir, src))
			if err != nil {
				t.Fatalf("compose.yaml: the daemon's peers file: %v", err)
			}
			peers = b
		}
	}
	var env []string
	for k := range grpoSvc["environment"].(map[string]any) {
		env = append(env, k)
	}
	trainer := services["trainer"].(map[string]any)
	check("compose.yaml", grpoArgs, stringList(trainer["command"]), env, peers)

	pods := k8sPodSpecs(t)
	c := podContainers(pods["grpo"])[0]
	var k8sEnv []string
	for _, e := range c["env"].([]any) {
		k8sEnv = append(k8sEnv, e.(map[string]any)["name"].(string))
	}
	var k8sPeers []byte
	for _, d := range yamlDocs(t, filepath.Join(deployDir, "k8s", "grpo.yaml")) {
		if d["kind"] == "ConfigMap" {
			s, _ := d["data"].(map[string]any)["peers.yaml"].(string)
			k8sPeers = []byte(s)
		}
	}
	check("k8s", stringList(c["args"]), stringList(podContainers(pods["trainer"])[0]["args"]), k8sEnv, k8sPeers)
}
