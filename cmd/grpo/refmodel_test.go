package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/rollout"
)

func TestRefmodelServe_QuirksOutOfRange(t *testing.T) {
	code, _, errs := cli(t, "refmodel", "serve", "--strict", "--quirks", "2")
	if code != 2 || !strings.Contains(errs, "--quirks 2: accepted 0 to 1") {
		t.Fatalf("exit %d, stderr %q; want 2 naming --quirks", code, errs)
	}
}

// TestRefmodelServe_Strict runs `grpo refmodel serve --strict` on a
// loopback port: a request with tools and no tool_choice (auto, as vLLM
// reads it) gets vLLM's 400 naming its flags.
func TestRefmodelServe_Strict(t *testing.T) {
	var errb testutil.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &errb, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- m.Run(ctx, []string{"refmodel", "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--strict"})
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d: %s", code, errb.String())
		}
	}()
	addr := regexp.MustCompile(`serving on (http://127\.0\.0\.1:\d+)`)
	var base string
	started := testutil.Eventually(func() bool {
		if mm := addr.FindStringSubmatch(errb.String()); mm != nil {
			base = mm[1]
		}
		return base != ""
	})
	if !started {
		t.Fatalf("server did not start within %s: %s", testutil.Patience, errb.String())
	}
	body, _ := json.Marshal(map[string]any{
		"model":    "refmodel",
		"messages": []map[string]string{{"role": "user", "content": "state: round=1"}},
		"tools":    rollout.Tools(),
	})
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error.Message, "--enable-auto-tool-choice") {
		t.Fatalf("status %d %q, want vLLM's 400 for auto tool choice", resp.StatusCode, e.Error.Message)
	}
}
