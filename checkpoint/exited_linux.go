package checkpoint

import (
	"bytes"
	"os"
	"strconv"
)

// exited reports whether process pid has exited and waits to be reaped:
// its state in /proc/PID/stat, the field after the command's closing
// parenthesis, is Z (zombie) or X (dead).
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false // no /proc: signal 0's answer stands
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'Z' || b[i+2] == 'X'
}
