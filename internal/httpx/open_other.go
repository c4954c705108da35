//go:build !unix

package httpx

// openCheck is empty: see open.
type openCheck struct{}

// open reports whether an idle connection is still usable; without a
// non-blocking read, one with nothing buffered is assumed to be.
func (c *pconn) open() bool { return c.br.Buffered() == 0 }
