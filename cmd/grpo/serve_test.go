package main

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/internal/testutil"
)

func TestServeLaunchAndWatch(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var serveErr testutil.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &testutil.Buffer{}, Stderr: &serveErr, Getenv: func(string) string { return "" }}
	done := make(chan int, 1)
	go func() {
		done <- m.Run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "d.db")})
	}()

	re := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)
	var url string
	started := testutil.Eventually(func() bool {
		if m := re.FindStringSubmatch(serveErr.String()); m != nil {
			url = m[1]
		}
		return url != ""
	})
	if !started {
		t.Fatalf("daemon did not start within %s: %s", testutil.Patience, serveErr.String())
	}
	resp, err := http.Post(url+"/api/v1/runs", "application/yaml", strings.NewReader("run: {name: w, steps: 2}\nvalidation: {episodes: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("launch: %s", resp.Status)
	}
	// watch prints the run's events and returns at run_finished (it may
	// attach after the first events: the run is already going).
	code, out, errs := cli(t, "watch", "w", "--addr", url)
	if code != 0 || !strings.Contains(out, "run_finished") {
		t.Fatalf("watch: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = cli(t, "best", "w", "--db", filepath.Join(dir, "d.db"), "--json")
	if code != 0 || !strings.Contains(out, `"run":"w"`) {
		t.Fatalf("best on the daemon's store while it runs: %d %s", code, out)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exit %d: %s", code, serveErr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop on cancel")
	}
}

func TestServeRefusesOpenAddressWithoutToken(t *testing.T) {
	code, _, errs := cli(t, "serve", "--addr", "0.0.0.0:0", "--db", filepath.Join(t.TempDir(), "d.db"))
	if code != 2 || !strings.Contains(errs, "GRPO_TOKEN") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}
