package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/refmodel"
)

// keyedTrainer is a reference backend's job API that answers 401 to any
// request without "Authorization: Bearer KEY".
type keyedTrainer struct {
	srv                *httptest.Server
	mu                 sync.Mutex
	authorized, denied int
}

func newKeyedTrainer(t *testing.T, b *refmodel.Backend, key string) *keyedTrainer {
	t.Helper()
	k := &keyedTrainer{}
	h := b.TrainerHandler()
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := r.Header.Get("Authorization") == "Bearer "+key
		k.mu.Lock()
		if ok {
			k.authorized++
		} else {
			k.denied++
		}
		k.mu.Unlock()
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"message":"missing or wrong bearer token"}}`))
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(k.srv.Close)
	return k
}

func (k *keyedTrainer) counts() (authorized, denied int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.authorized, k.denied
}

// grepTree fails the test for every file under dir that holds secret.
func grepTree(t *testing.T, dir, secret string) int {
	t.Helper()
	files := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("read %s: %v", path, err)
			return nil
		}
		files++
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("%s holds the planted key", path)
		}
		return nil
	})
	return files
}

// TestTrainerAPIKey (issue 13, the real binaries): trainer.api_key_env
// names the variable whose value the job API gets as a bearer token, from
// 'grpo run' (config) and from 'grpo serve' (a trainer declared in its
// peers file, which a posted config names). The trainer refuses requests
// without it, so the runs succeeding shows the key was sent with every
// request; and the planted key appears in no file of the test directory:
// stores, data directories, configs, peers file, stdout and stderr.
func TestTrainerAPIKey(t *testing.T) {
	bin := buildBinary(t)
	const key = "planted-trainer-key-5f1c0e9a"
	dir := t.TempDir()
	env := append(os.Environ(), "GRPO_TEST_TRAINER_KEY="+key)

	t.Run("run", func(t *testing.T) {
		b := refBackend(t, 1)
		tr := newKeyedTrainer(t, b, key)
		inf := httptest.NewServer(b.InferenceHandler())
		t.Cleanup(inf.Close)
		cfg := filepath.Join(dir, "run.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`run: {name: keyed, steps: 2, seed: 4}
validation: {episodes: 2}
inference: {model: %s, endpoints: [{url: %s/v1, api_key_env: "-"}]}
trainer: {kind: jobs, url: %s, api_key_env: GRPO_TEST_TRAINER_KEY, base_model: %s, hyperparameters: {learning_rate: %v}}
`, refmodel.BaseModelName, inf.URL, tr.srv.URL, refmodel.BaseModelName, refmodel.DefaultLearningRate)), 0o644)
		db := filepath.Join(dir, "run.db")
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, "run", "--config", cfg, "--db", db)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("grpo run: %v\n%s", err, stderr.String())
		}
		show, _ := exec.Command(bin, "runs", "show", "keyed", "--db", db, "--json").Output()
		os.WriteFile(filepath.Join(dir, "run.stdout"), append(stdout.Bytes(), show...), 0o644)
		os.WriteFile(filepath.Join(dir, "run.stderr"), stderr.Bytes(), 0o644)
		if a, d := tr.counts(); a < 4 || d != 0 {
			t.Fatalf("trainer: %d authorized requests, %d denied; want every request (create, polls of 2 jobs, health) authorized", a, d)
		}
		// Without the variable the trainer refuses the run's health check.
		out, err := exec.Command(bin, "run", "--config", cfg, "--db", filepath.Join(dir, "nokey.db"), "--name", "nokey").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "401") ||
			!strings.Contains(string(out), "trainer.api_key_env names $GRPO_TEST_TRAINER_KEY, which is not set or empty: no API key is sent") {
			t.Fatalf("grpo run without the key: %v\n%s; want the trainer's 401 and a warning naming the variable", err, out)
		}
	})

	t.Run("serve", func(t *testing.T) {
		b := refBackend(t, 2)
		tr := newKeyedTrainer(t, b, key)
		inf := httptest.NewServer(b.InferenceHandler())
		t.Cleanup(inf.Close)
		peers := filepath.Join(dir, "peers.yaml")
		os.WriteFile(peers, []byte(fmt.Sprintf("inference:\n  v: {url: '%s/v1'}\ntrainers:\n  t: {url: '%s', api_key_env: GRPO_TEST_TRAINER_KEY}\n", inf.URL, tr.srv.URL)), 0o644)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		var stdout, stderr bytes.Buffer
		daemon := exec.Command(bin, "serve", "--addr", addr, "--db", filepath.Join(dir, "daemon.db"), "--peers", peers)
		daemon.Env, daemon.Stdout, daemon.Stderr = env, &stdout, &stderr
		if err := daemon.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			daemon.Process.Kill()
			daemon.Wait()
			os.WriteFile(filepath.Join(dir, "serve.stdout"), stdout.Bytes(), 0o644)
			os.WriteFile(filepath.Join(dir, "serve.stderr"), stderr.Bytes(), 0o644)
		}()
		base := "http://" + addr
		waitHealthy(t, base)
		body := fmt.Sprintf(`{"run": {"name": "keyed", "steps": 2, "seed": 4}, "validation": {"episodes": 2},
"inference": {"model": %q, "endpoints": [{"peer": "v"}]},
"trainer": {"peer": "t", "base_model": %q, "hyperparameters": {"learning_rate": %v}}}`, refmodel.BaseModelName, refmodel.BaseModelName, refmodel.DefaultLearningRate)
		resp, err := http.Post(base+"/api/v1/runs", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		msg := new(bytes.Buffer)
		msg.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("launch: %s %s", resp.Status, msg)
		}
		var state struct {
			State, Error string
		}
		succeeded := testutil.Eventually(func() bool {
			if resp, err := http.Get(base + "/api/v1/runs/keyed"); err == nil {
				json.NewDecoder(resp.Body).Decode(&state)
				resp.Body.Close()
			}
			if state.State == "failed" {
				t.Fatalf("daemon's run: %+v", state)
			}
			return state.State == "succeeded"
		})
		if !succeeded {
			t.Fatalf("daemon's run did not succeed within %s: %+v", testutil.Patience, state)
		}
		if a, d := tr.counts(); a < 4 || d != 0 {
			t.Fatalf("trainer: %d authorized requests, %d denied; want every request authorized", a, d)
		}
		// A posted config cannot send the declared key elsewhere.
		resp, err = http.Post(base+"/api/v1/runs", "application/yaml", strings.NewReader(
			"run: {name: steal}\ninference: {model: m, endpoints: [{peer: v}]}\ntrainer: {kind: jobs, url: 'http://127.0.0.1:9', base_model: m, api_key_env: GRPO_TEST_TRAINER_KEY}\n"))
		if err != nil {
			t.Fatal(err)
		}
		msg.Reset()
		msg.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg.String(), "trainer.api_key_env") {
			t.Fatalf("posted trainer api_key_env: %s %s, want 400 naming trainer.api_key_env", resp.Status, msg)
		}
	})
	if n := grepTree(t, dir, key); n < 8 {
		t.Fatalf("searched only %d files", n)
	}
}
