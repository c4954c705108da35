package server

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// dashboard serves the page and its assets from the binary: no CDN, so it
// works offline.
func dashboard() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.FileServerFS(sub)
}
