//go:build !linux

package httpx

import (
	"context"
	"net"
	"time"
)

// dialSocket is Linux's: elsewhere net.Dialer dials every connection.
func dialSocket(context.Context, time.Time, string) (net.Conn, bool, error) {
	return nil, false, nil
}

// handshakeResent is Linux's: elsewhere it is not known.
func handshakeResent(net.Conn) (resent, known bool) { return false, false }
