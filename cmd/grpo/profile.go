package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// profiles are the CPU and allocation profiles a command writes when
// asked (--cpuprofile, --memprofile), for `go tool pprof`.
type profiles struct{ cpu, mem string }

func (p *profiles) flags(fs *flag.FlagSet, of string) {
	fs.StringVar(&p.cpu, "cpuprofile", "", "write a CPU profile of "+of+" to this file (read it with go tool pprof)")
	fs.StringVar(&p.mem, "memprofile", "", "write an allocation profile of "+of+" to this file at the end")
}

// start opens the files and starts the CPU profile; stop ends it and
// writes the allocation profile. A file that cannot be created is an
// error before any work.
func (p *profiles) start() (stop func() error, err error) {
	var cpu, mem *os.File
	closeAll := func() {
		for _, f := range []*os.File{cpu, mem} {
			if f != nil {
				f.Close()
			}
		}
	}
	if p.cpu != "" {
		if cpu, err = os.Create(p.cpu); err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	if p.mem != "" {
		if mem, err = os.Create(p.mem); err != nil {
			closeAll()
			return nil, fmt.Errorf("--memprofile: %w", err)
		}
	}
	if cpu != nil {
		if err := pprof.StartCPUProfile(cpu); err != nil {
			closeAll()
			return nil, fmt.Errorf("--cpuprofile %s: %w", p.cpu, err)
		}
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			if err := cpu.Close(); err != nil {
				errs = append(errs, fmt.Errorf("--cpuprofile %s: %w", p.cpu, err))
			}
		}
		if mem != nil {
			// The profile holds what the last finished collection saw: one
			// now brings in everything allocated since (with GOGC at 200,
			// the last may be a good part of the run ago).
			runtime.GC()
			err := pprof.Lookup("allocs").WriteTo(mem, 0)
			if cerr := mem.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("--memprofile %s: %w", p.mem, err))
			}
		}
		return errors.Join(errs...)
	}, nil
}
