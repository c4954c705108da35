package testutil

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent writers and a reader: a
// log destination or a process's output that a test reads while the code
// under test writes to it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
