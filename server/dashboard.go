package server

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// dashboardSettings are what the page asks of the daemon at load:
// GET /dashboard.json.
type dashboardSettings struct {
	// GrafanaURL links the page to the Grafana dashboard; empty: no link.
	GrafanaURL string `json:"grafana_url"`
}

// dashboard serves the page and its assets from the binary: no CDN, so it
// works offline.
func dashboard(settings dashboardSettings) http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/dashboard.json" {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(settings)
			return
		}
		files.ServeHTTP(w, r)
	})
}
