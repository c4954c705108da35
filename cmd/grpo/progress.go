package main

import (
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress is a progress bar on a terminal and silence elsewhere.
type progress struct{ bar *progressbar.ProgressBar }

func newProgress(w io.Writer, total int, what string) *progress {
	f, ok := w.(*os.File)
	if !ok || !isTerminal(f) {
		return &progress{}
	}
	return &progress{bar: progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100_000_000),
	)}
}

func (p *progress) Add(n int) {
	if p.bar != nil {
		p.bar.Add(n)
	}
}

func (p *progress) Describe(s string) {
	if p.bar != nil {
		p.bar.Describe(s)
	}
}

func (p *progress) Finish() {
	if p.bar != nil {
		p.bar.Finish()
	}
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }
