package checkpoint

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/grpo-dev/grpo/internal/testutil"
)

// TestProcessAliveZombie: a child that is running is alive; once killed
// and before it is reaped (a zombie, as a SIGKILLed daemon is until its
// parent waits) it is not; this process is.
func TestProcessAliveZombie(t *testing.T) {
	if !processAlive(os.Getpid()) {
		t.Fatal("this process is not alive")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("start sleep: %v", err)
	}
	pid := cmd.Process.Pid
	reaped := false
	defer func() {
		if !reaped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	if !processAlive(pid) {
		t.Fatalf("running child %d is not alive", pid)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Wait for the kernel to make it a zombie; do not reap it.
	if !testutil.Eventually(func() bool { return exited(pid) }) {
		t.Fatalf("the killed child %d did not exit within %s", pid, testutil.Patience)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the zombie %d does not answer signal 0 (%v): the test shows nothing", pid, err)
	}
	if processAlive(pid) {
		t.Fatalf("killed, unreaped child %d counts as alive", pid)
	}
	cmd.Wait()
	reaped = true
	if processAlive(pid) {
		t.Fatalf("reaped child %d counts as alive", pid)
	}
}
